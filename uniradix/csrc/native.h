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
PyObject *native_chain_digests_many(PyObject *module, PyObject *args);
PyObject *native_cbor_chain_digests(PyObject *module, PyObject *args);
PyObject *native_sha256(PyObject *module, PyObject *args);
PyObject *native_sha256_implementation(PyObject *module, PyObject *unused);

/* Whether `view` is a 1-D buffer of native int64 (a numpy int64 vector, any stride). */
static inline int is_int64_vector(const Py_buffer *view) {
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    return view->ndim == 1 && view->itemsize == 8 && (f[0] == 'l' || f[0] == 'q') && !f[1];
}

/* page_free.c */
PyObject *native_free_slots(PyObject *module, PyObject *args);

/* slot_checks.c */
PyObject *native_count_equal(PyObject *module, PyObject *args);
PyObject *native_whole_pages(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* msgpack_ints.c */
PyObject *native_msgpack_ints(PyObject *module, PyObject *args);

/* tree_walk.c */
PyObject *native_walk_edges(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* cluster_slots.c */
PyObject *native_cluster_slot_runs(PyObject *module, PyObject *names);

/* row_copy.c */
PyObject *native_copy_row_runs(PyObject *module, PyObject *args);

#endif
