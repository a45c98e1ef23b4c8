/* Chained page digests of packed keys: SGLang's chain (`uniradix/page_hash.py`) and vLLM's
 * sha256_cbor chain (`uniradix/events/hashing.py`), byte for byte, one call per node with
 * the GIL released. */
#include "native.h" /* first: it includes Python.h, which must precede the C headers */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define UNIT_BYTES 8 /* a packed key unit: int64, little-endian */
#define WIDE_TAG 0xff

static uint64_t load_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void store_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* Writes the bytes a page of `page_size` units is hashed as, returns their count:
 * bigram: each unit (a << 32 | b) as a then b, uint32 little-endian;
 * every unit in [0, 2**32): each as uint32 little-endian;
 * else the wide form: the tag byte then the units as packed (int64 little-endian). */
static size_t encode_page(uint8_t *out, const uint8_t *page, size_t page_size, int bigram) {
    if (bigram) {
        for (size_t i = 0; i < page_size; i++) {
            uint64_t unit = load_le64(page + UNIT_BYTES * i);
            store_le32(out + 8 * i, (uint32_t)(unit >> 32));
            store_le32(out + 8 * i + 4, (uint32_t)unit);
        }
        return 8 * page_size;
    }
    for (size_t i = 0; i < page_size; i++) {
        if (load_le64(page + UNIT_BYTES * i) >> 32) { /* negative or >= 2**32 */
            out[0] = WIDE_TAG;
            memcpy(out + 1, page, UNIT_BYTES * page_size);
            return 1 + UNIT_BYTES * page_size;
        }
    }
    for (size_t i = 0; i < page_size; i++)
        store_le32(out + 4 * i, (uint32_t)load_le64(page + UNIT_BYTES * i));
    return 4 * page_size;
}

/* The set-up both chains share: checks `page_size` and the prior digest (when given or
 * `prior_required`), makes the result (one digest per whole page of the `units_len` bytes
 * of units) and, when there are pages, a scratch buffer for messages of up to
 * `fixed + per_unit * page_size` bytes.
 * Returns the result (`*num_pages` set), or NULL with an exception set. */
static PyObject *start_chain(Py_ssize_t units_len, Py_ssize_t page_size, const Py_buffer *prior,
                             int prior_required, size_t fixed, size_t per_unit,
                             size_t *num_pages, uint8_t **scratch) {
    if (page_size < 1) {
        PyErr_Format(PyExc_ValueError, "page_size must be >= 1, got %zd", page_size);
        return NULL;
    }
    if ((prior_required || prior->buf != NULL) && prior->len != SHA256_DIGEST_BYTES) {
        PyErr_Format(PyExc_ValueError, "prior digest must be %d bytes, got %zd",
                     SHA256_DIGEST_BYTES, prior->len);
        return NULL;
    }
    /* Written this way so that a huge page_size cannot overflow the product. */
    *num_pages = (size_t)units_len / UNIT_BYTES / (size_t)page_size;
    PyObject *result =
        PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(*num_pages * SHA256_DIGEST_BYTES));
    if (result == NULL || *num_pages == 0) return result;
    *scratch = malloc(sha256_padded_len(fixed + per_unit * (size_t)page_size));
    if (*scratch == NULL) {
        Py_DECREF(result);
        return PyErr_NoMemory();
    }
    return result;
}

/* Hashes one node's `num_pages` pages at `page` into `out`, chained from `previous` (NULL at
 * an unseeded root); `scratch` has room for a prior digest and one encoded page. */
static void chain_pages(const uint8_t *page, size_t num_pages, size_t page_size, int bigram,
                        const uint8_t *previous, uint8_t *scratch, uint8_t *out) {
    for (size_t p = 0; p < num_pages; p++) {
        size_t len = 0;
        if (previous != NULL) {
            memcpy(scratch, previous, SHA256_DIGEST_BYTES);
            len = SHA256_DIGEST_BYTES;
        }
        len += encode_page(scratch + len, page, page_size, bigram);
        sha256_padded_digest(scratch, len, out, native_compress);
        previous = out;
        out += SHA256_DIGEST_BYTES;
        page += UNIT_BYTES * page_size;
    }
}

PyObject *native_chain_digests(PyObject *module, PyObject *args) {
    Py_buffer units, prior;
    Py_ssize_t page_size;
    int bigram;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nz*p:chain_digests", &units, &page_size, &prior, &bigram))
        return NULL;
    uint8_t *scratch = NULL;
    size_t num_pages = 0;
    PyObject *result = start_chain(units.len, page_size, &prior, 0, SHA256_DIGEST_BYTES + 1,
                                   UNIT_BYTES, &num_pages, &scratch);
    if (result == NULL || num_pages == 0) goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    chain_pages(units.buf, num_pages, (size_t)page_size, bigram, prior.buf, scratch, out);
    Py_END_ALLOW_THREADS
done:
    free(scratch);
    PyBuffer_Release(&units);
    PyBuffer_Release(&prior);
    return result;
}

/* chain_digests for many nodes in one call, the GIL released once: `units` a list of bytes,
 * `priors` a list of the same length whose item i is None (an unseeded root), a 32-byte
 * digest, or the index j < i of the node whose last digest node i chains from (a node
 * without whole pages passes its own prior on). Returns the list of digest blobs. One
 * release instead of one per node: a thread hashing a step's nodes beside a busy caller
 * waits for the GIL after each release (`uniradix/node_digests.py`). */
PyObject *native_chain_digests_many(PyObject *module, PyObject *args) {
    PyObject *unit_list, *prior_list;
    Py_ssize_t page_size;
    int bigram;
    (void)module;
    if (!PyArg_ParseTuple(args, "O!O!np:chain_digests_many", &PyList_Type, &unit_list,
                          &PyList_Type, &prior_list, &page_size, &bigram))
        return NULL;
    if (page_size < 1) {
        PyErr_Format(PyExc_ValueError, "page_size must be >= 1, got %zd", page_size);
        return NULL;
    }
    /* Tuples: what the loop reads while the GIL is released cannot change under it. */
    PyObject *units = PyList_AsTuple(unit_list), *priors = PyList_AsTuple(prior_list);
    PyObject *result = NULL;
    const uint8_t **last = NULL, **first_prior = NULL;
    uint8_t *scratch = NULL;
    if (units == NULL || priors == NULL) goto done;
    Py_ssize_t n = PyTuple_GET_SIZE(units);
    if (PyTuple_GET_SIZE(priors) != n) {
        PyErr_Format(PyExc_ValueError, "%zd priors for %zd nodes", PyTuple_GET_SIZE(priors), n);
        goto done;
    }
    result = PyList_New(n);
    /* Per node: the digest its first page chains from, and the digest it ends on. */
    last = calloc((size_t)n + 1, sizeof(uint8_t *));
    first_prior = calloc((size_t)n + 1, sizeof(uint8_t *));
    scratch = malloc(sha256_padded_len(SHA256_DIGEST_BYTES + 1 + UNIT_BYTES * (size_t)page_size));
    if (result == NULL || last == NULL || first_prior == NULL || scratch == NULL) {
        if (result != NULL) PyErr_NoMemory();
        Py_CLEAR(result);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(units, i), *prior = PyTuple_GET_ITEM(priors, i);
        if (!PyBytes_Check(key)) {
            PyErr_Format(PyExc_TypeError, "units[%zd] must be bytes", i);
            Py_CLEAR(result);
            goto done;
        }
        if (prior == Py_None) {
            first_prior[i] = NULL;
        } else if (PyBytes_Check(prior) && PyBytes_GET_SIZE(prior) == SHA256_DIGEST_BYTES) {
            first_prior[i] = (const uint8_t *)PyBytes_AS_STRING(prior);
        } else {
            Py_ssize_t j = PyLong_Check(prior) ? PyLong_AsSsize_t(prior) : -1;
            if (j < 0 || j >= i) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError,
                             "priors[%zd] must be None, a %d-byte digest or an index below it",
                             i, SHA256_DIGEST_BYTES);
                Py_CLEAR(result);
                goto done;
            }
            first_prior[i] = last[j];
        }
        size_t pages = (size_t)PyBytes_GET_SIZE(key) / UNIT_BYTES / (size_t)page_size;
        PyObject *blob = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(pages * SHA256_DIGEST_BYTES));
        if (blob == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, blob);
        last[i] = pages ? (const uint8_t *)PyBytes_AS_STRING(blob) +
                              (pages - 1) * SHA256_DIGEST_BYTES
                        : first_prior[i];
    }
    /* An index prior names a blob of `result`, written before it is read. */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *blob = PyList_GET_ITEM(result, i);
        size_t pages = (size_t)PyBytes_GET_SIZE(blob) / SHA256_DIGEST_BYTES;
        chain_pages((const uint8_t *)PyBytes_AS_STRING(PyTuple_GET_ITEM(units, i)), pages,
                    (size_t)page_size,
                    bigram, first_prior[i], scratch, (uint8_t *)PyBytes_AS_STRING(blob));
    }
    Py_END_ALLOW_THREADS
done:
    Py_XDECREF(units);
    Py_XDECREF(priors);
    free(last);
    free(first_prior);
    free(scratch);
    return result;
}

/* Writes `value` as a CBOR unsigned integer in its shortest form (RFC 8949 §4.2.1, as
 * canonical CBOR requires), returns the bytes written (1 to 9). */
static size_t cbor_uint(uint8_t *out, uint64_t value) {
    if (value < 24) {
        out[0] = (uint8_t)value;
        return 1;
    }
    int width = value < (1u << 8) ? 1 : value < (1u << 16) ? 2 : value <= 0xffffffffu ? 4 : 8;
    out[0] = (uint8_t)(width == 1 ? 24 : width == 2 ? 25 : width == 4 ? 26 : 27);
    for (int i = 0; i < width; i++) out[1 + i] = (uint8_t)(value >> (8 * (width - 1 - i)));
    return 1 + (size_t)width;
}

/* vLLM's sha256_cbor chain (see uniradix/events/hashing.py): page p's message is
 * lead || prior digest || array head || the page's units as CBOR unsigned integers || tail,
 * the tail being `first_tail` for page 0 and `tail` after it. The caller builds the fixed
 * parts and has checked that every unit is >= 0. */
PyObject *native_cbor_chain_digests(PyObject *module, PyObject *args) {
    Py_buffer units, prior, lead, array_head, first_tail, tail;
    Py_ssize_t page_size;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*ny*y*y*y*y*:cbor_chain_digests", &units, &page_size, &prior,
                          &lead, &array_head, &first_tail, &tail))
        return NULL;
    uint8_t *scratch = NULL;
    size_t num_pages = 0;
    size_t longest_tail = (size_t)(first_tail.len > tail.len ? first_tail.len : tail.len);
    size_t fixed = (size_t)lead.len + SHA256_DIGEST_BYTES + (size_t)array_head.len + longest_tail;
    PyObject *result =
        start_chain(units.len, page_size, &prior, 1, fixed, 9, &num_pages, &scratch);
    if (result == NULL || num_pages == 0) goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    const uint8_t *page = units.buf;
    const uint8_t *previous = prior.buf;
    sha256_compress_fn compress = native_compress;
    Py_BEGIN_ALLOW_THREADS
    for (size_t p = 0; p < num_pages; p++) {
        size_t len = 0;
        memcpy(scratch, lead.buf, (size_t)lead.len);
        len += (size_t)lead.len;
        memcpy(scratch + len, previous, SHA256_DIGEST_BYTES);
        len += SHA256_DIGEST_BYTES;
        memcpy(scratch + len, array_head.buf, (size_t)array_head.len);
        len += (size_t)array_head.len;
        for (Py_ssize_t i = 0; i < page_size; i++)
            len += cbor_uint(scratch + len, load_le64(page + UNIT_BYTES * (size_t)i));
        const Py_buffer *end = p == 0 ? &first_tail : &tail;
        memcpy(scratch + len, end->buf, (size_t)end->len);
        len += (size_t)end->len;
        sha256_padded_digest(scratch, len, out, compress);
        previous = out;
        out += SHA256_DIGEST_BYTES;
        page += UNIT_BYTES * (size_t)page_size;
    }
    Py_END_ALLOW_THREADS
done:
    free(scratch);
    PyBuffer_Release(&units);
    PyBuffer_Release(&prior);
    PyBuffer_Release(&lead);
    PyBuffer_Release(&array_head);
    PyBuffer_Release(&first_tail);
    PyBuffer_Release(&tail);
    return result;
}

PyObject *native_sha256(PyObject *module, PyObject *args) {
    Py_buffer data;
    int portable;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*p:sha256", &data, &portable)) return NULL;
    uint8_t *buf = malloc(sha256_padded_len((size_t)data.len));
    if (buf == NULL) {
        PyBuffer_Release(&data);
        return PyErr_NoMemory();
    }
    uint8_t digest[SHA256_DIGEST_BYTES];
    memcpy(buf, data.buf, (size_t)data.len);
    sha256_padded_digest(buf, (size_t)data.len, digest,
                         portable ? sha256_compress_portable : native_compress);
    free(buf);
    PyBuffer_Release(&data);
    return PyBytes_FromStringAndSize((const char *)digest, SHA256_DIGEST_BYTES);
}

PyObject *native_sha256_implementation(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return PyUnicode_FromString(native_compress_name);
}
