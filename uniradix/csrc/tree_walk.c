/* walk_edges: the radix tree's match walk (`uniradix.tree.walk.walk_edges`) in one call.
 *
 * A match runs on every request; in Python each step of the walk is a slice, a dict lookup,
 * two attribute reads and a compare, and the key must be a `bytes` copy of the request's
 * tokens. Here the steps read the caller's buffer in place (SGLang's `array('q')` of token
 * ids, or a key's bytes) and only the page used as a child's dict key is copied. The tree
 * itself is untouched: a walk that leaves an edge part way returns that child, and the
 * caller splits it. */
#include "native.h"

static PyObject *str_children, *str_key;

/* walk_edges(root, units, num_bytes, page_bytes, namespace) -> (path, offset, diverged) */
PyObject *native_walk_edges(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "walk_edges takes 5 arguments");
        return NULL;
    }
    if (str_children == NULL) {
        str_children = PyUnicode_InternFromString("children");
        str_key = PyUnicode_InternFromString("key");
        if (str_children == NULL || str_key == NULL) return NULL;
    }
    Py_ssize_t num_bytes = PyLong_AsSsize_t(args[2]);
    Py_ssize_t page_bytes = PyLong_AsSsize_t(args[3]);
    if ((num_bytes == -1 || page_bytes == -1) && PyErr_Occurred()) return NULL;
    PyObject *namespace = args[4];
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) return NULL;
    if (page_bytes < 1 || num_bytes < 0 || num_bytes > view.len) {
        PyErr_Format(PyExc_ValueError,
                     "walk_edges: num_bytes %zd must lie within the buffer's %zd bytes and "
                     "page_bytes %zd be positive",
                     num_bytes, view.len, page_bytes);
        PyBuffer_Release(&view);
        return NULL;
    }
    const char *units = view.buf;
    PyObject *node = args[0], *diverged = NULL;
    Py_INCREF(node);
    PyObject *path = PyList_New(0);
    Py_ssize_t offset = 0;
    if (path == NULL) goto fail;
    while (offset < num_bytes) {
        /* As a Python slice of the units: cut at the buffer's end, not at num_bytes. */
        PyObject *lookup =
            PyBytes_FromStringAndSize(units + offset, Py_MIN(page_bytes, view.len - offset));
        if (lookup != NULL && namespace != Py_None) {
            PyObject *page = lookup;
            lookup = PyTuple_Pack(2, namespace, page);
            Py_DECREF(page);
        }
        PyObject *children = lookup ? PyObject_GetAttr(node, str_children) : NULL;
        if (children == NULL || !PyDict_Check(children)) {
            if (children != NULL) PyErr_SetString(PyExc_TypeError, "node.children is not a dict");
            Py_XDECREF(children);
            Py_XDECREF(lookup);
            goto fail;
        }
        PyObject *child = PyDict_GetItemWithError(children, lookup); /* borrowed */
        Py_XINCREF(child);
        Py_DECREF(children);
        Py_DECREF(lookup);
        if (child == NULL) {
            if (PyErr_Occurred()) goto fail;
            break;
        }
        PyObject *edge = PyObject_GetAttr(child, str_key);
        if (edge == NULL || !PyBytes_Check(edge)) {
            if (edge != NULL) PyErr_SetString(PyExc_TypeError, "node.key is not bytes");
            Py_XDECREF(edge);
            Py_DECREF(child);
            goto fail;
        }
        Py_ssize_t edge_bytes = PyBytes_GET_SIZE(edge);
        int whole = edge_bytes <= num_bytes - offset &&
                    memcmp(units + offset, PyBytes_AS_STRING(edge), (size_t)edge_bytes) == 0;
        Py_DECREF(edge);
        if (!whole) {
            diverged = child;
            break;
        }
        if (PyList_Append(path, child) < 0) {
            Py_DECREF(child);
            goto fail;
        }
        offset += edge_bytes;
        Py_DECREF(node);
        node = child;
    }
    Py_DECREF(node);
    PyBuffer_Release(&view);
    if (diverged == NULL) {
        diverged = Py_None;
        Py_INCREF(diverged);
    }
    return Py_BuildValue("(NnN)", path, offset, diverged);

fail:
    Py_DECREF(node);
    Py_XDECREF(path);
    PyBuffer_Release(&view);
    return NULL;
}
