/* The checks of an insert's slots (`uniradix.cache.insert_slots`), one pass each where numpy
 * makes temporary arrays and takes several passes:
 *
 * - whole_pages: whether a node value is made of whole pages (`uniradix.slots.whole_pages`,
 *   the same answer as its numpy path for every input);
 * - count_equal: an insert's duplicate slots against the tree's own.
 *
 * Both only read their buffers and hold the GIL (a few microseconds). */
#include "native.h" /* first: it includes Python.h, which must precede the C headers */

#include <stdint.h>
#include <string.h>

static inline int64_t slot_at(const char *base, Py_ssize_t stride, Py_ssize_t i) {
    int64_t slot;
    memcpy(&slot, base + i * stride, sizeof slot);
    return slot;
}

/* whole_pages(slots, page_size) -> bool: each run of `page_size` slots is one page,
 * `p * page_size + 0 .. page_size - 1`: its first slot a multiple of `page_size` (negative
 * ones included, as numpy's `%` takes them) and each slot one more than the one before, in
 * wrapping int64 arithmetic as numpy's subtraction is. A length that is not a multiple of
 * `page_size` is refused with ValueError (the numpy path's contract, checked here). */
PyObject *native_whole_pages(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "whole_pages takes 2 arguments");
    Py_ssize_t page_size = PyLong_AsSsize_t(args[1]);
    if (page_size == -1 && PyErr_Occurred()) return NULL;
    if (page_size < 1) return PyErr_Format(PyExc_ValueError, "page_size %zd < 1", page_size);
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_STRIDES | PyBUF_FORMAT)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = view.ndim == 1 ? view.shape[0] : 0;
    if (!is_int64_vector(&view) || n % page_size) {
        PyErr_Format(PyExc_ValueError,
                     "whole_pages: a 1-D int64 buffer of whole runs of %zd slots", page_size);
    } else {
        const char *base = view.buf;
        Py_ssize_t stride = view.strides[0];
        int whole = 1;
        for (Py_ssize_t i = 0; i < n && whole; i += page_size) {
            int64_t first = slot_at(base, stride, i);
            if (first % page_size) whole = 0; /* C's remainder is 0 exactly when numpy's is */
            /* Unsigned differences wrap as numpy's int64 subtraction does. */
            for (Py_ssize_t j = 1; j < page_size && whole; j++)
                whole = (uint64_t)slot_at(base, stride, i + j) - (uint64_t)first == (uint64_t)j;
        }
        result = PyBool_FromLong(whole);
    }
    PyBuffer_Release(&view);
    return result;
}

/* count_equal(a, b): at how many positions two 1-D int64 buffers of one length hold the
 * same value; an insert's duplicate slots against the tree's own (`cache.insert_slots`),
 * where numpy makes a mask and counts it, two passes and an array. */
PyObject *native_count_equal(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *a_obj, *b_obj;
    if (!PyArg_ParseTuple(args, "OO", &a_obj, &b_obj)) return NULL;
    Py_buffer a, b;
    if (PyObject_GetBuffer(a_obj, &a, PyBUF_STRIDES | PyBUF_FORMAT)) return NULL;
    if (PyObject_GetBuffer(b_obj, &b, PyBUF_STRIDES | PyBUF_FORMAT)) {
        PyBuffer_Release(&a);
        return NULL;
    }
    PyObject *result = NULL;
    if (!is_int64_vector(&a) || !is_int64_vector(&b) || a.shape[0] != b.shape[0]) {
        PyErr_SetString(PyExc_ValueError, "count_equal: two 1-D int64 buffers of one length");
    } else {
        const char *pa = a.buf, *pb = b.buf;
        Py_ssize_t equal = 0, n = a.shape[0];
        if (a.strides[0] == 8 && b.strides[0] == 8) { /* contiguous: a loop the compiler
                                                          vectorizes */
            for (Py_ssize_t i = 0; i < n; i++) {
                int64_t x, y;
                memcpy(&x, pa + i * 8, sizeof x);
                memcpy(&y, pb + i * 8, sizeof y);
                equal += x == y;
            }
            n = 0;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t x, y;
            memcpy(&x, pa + i * a.strides[0], sizeof x);
            memcpy(&y, pb + i * b.strides[0], sizeof y);
            equal += x == y;
        }
        result = PyLong_FromSsize_t(equal);
    }
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return result;
}
