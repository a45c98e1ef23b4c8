/* What the files of uniradix._native share: the functions the module table lists and the
 * SHA-256 compression function chosen at import. */
#ifndef UNIRADIX_NATIVE_H
#define UNIRADIX_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sha256.h"

/* The fastest SHA-256 compression this CPU runs and its name; set by the module's init. */
extern sha256_compress_fn native_compress;
extern const char *native_compress_name;

/* page_digests.c */
PyObject *native_chain_digests(PyObject *module, PyObject *args);
PyObject *native_cbor_chain_digests(PyObject *module, PyObject *args);
PyObject *native_sha256(PyObject *module, PyObject *args);
PyObject *native_sha256_implementation(PyObject *module, PyObject *unused);

/* page_free.c */
PyObject *native_free_slots(PyObject *module, PyObject *args);
PyObject *native_count_equal(PyObject *module, PyObject *args);

/* msgpack_ints.c */
PyObject *native_msgpack_ints(PyObject *module, PyObject *args);

/* row_copy.c */
PyObject *native_copy_row_runs(PyObject *module, PyObject *args);

#endif
