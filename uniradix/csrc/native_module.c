/* uniradix._native: the two hot loops the pure-Python code cannot run in one pass.
 *
 * - chain_digests: SGLang's chained SHA-256 of every whole page of a packed key (the
 *   encoding of `uniradix/page_hash.py`, byte for byte), one call per node, and
 *   cbor_chain_digests, vLLM's sha256_cbor chain (`uniradix/events/hashing.py`);
 * - copy_row_runs: one memmove per row (or per run of rows contiguous on both sides) of
 *   every (source, destination) pair of 2-D byte arrays, for the host tier's CPU copier.
 *
 * Both release the GIL while they work and check every index against the buffers they were
 * given, whatever the Python wrapper (`uniradix/native.py`) already checked. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sha256.h"

#define UNIT_BYTES 8 /* a packed key unit: int64, little-endian */
#define WIDE_TAG 0xff

static sha256_compress_fn fast_compress = sha256_compress_portable;
static const char *fast_compress_name = "portable";

/* ------------------------------------------------------------------ page digests */
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

static PyObject *chain_digests(PyObject *module, PyObject *args) {
    Py_buffer units, prior;
    Py_ssize_t page_size;
    int bigram;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nz*p:chain_digests", &units, &page_size, &prior, &bigram))
        return NULL;
    PyObject *result = NULL;
    uint8_t *scratch = NULL;
    if (page_size < 1) {
        PyErr_Format(PyExc_ValueError, "page_size must be >= 1, got %zd", page_size);
        goto done;
    }
    if (prior.buf != NULL && prior.len != SHA256_DIGEST_BYTES) {
        PyErr_Format(PyExc_ValueError, "prior digest must be %d bytes, got %zd",
                     SHA256_DIGEST_BYTES, prior.len);
        goto done;
    }
    /* Written this way so that a huge page_size cannot overflow the product. */
    size_t num_pages = (size_t)units.len / UNIT_BYTES / (size_t)page_size;
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(num_pages * SHA256_DIGEST_BYTES));
    if (result == NULL || num_pages == 0) goto done;
    size_t most = SHA256_DIGEST_BYTES + 1 + UNIT_BYTES * (size_t)page_size;
    scratch = malloc(sha256_padded_len(most));
    if (scratch == NULL) {
        Py_CLEAR(result);
        PyErr_NoMemory();
        goto done;
    }
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    const uint8_t *page = units.buf;
    const uint8_t *previous = prior.buf; /* NULL at an unseeded root */
    sha256_compress_fn compress = fast_compress;
    Py_BEGIN_ALLOW_THREADS
    for (size_t p = 0; p < num_pages; p++) {
        size_t len = 0;
        if (previous != NULL) {
            memcpy(scratch, previous, SHA256_DIGEST_BYTES);
            len = SHA256_DIGEST_BYTES;
        }
        len += encode_page(scratch + len, page, (size_t)page_size, bigram);
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
static PyObject *cbor_chain_digests(PyObject *module, PyObject *args) {
    Py_buffer units, prior, lead, array_head, first_tail, tail;
    Py_ssize_t page_size;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*ny*y*y*y*y*:cbor_chain_digests", &units, &page_size, &prior,
                          &lead, &array_head, &first_tail, &tail))
        return NULL;
    PyObject *result = NULL;
    uint8_t *scratch = NULL;
    if (page_size < 1) {
        PyErr_Format(PyExc_ValueError, "page_size must be >= 1, got %zd", page_size);
        goto done;
    }
    if (prior.len != SHA256_DIGEST_BYTES) {
        PyErr_Format(PyExc_ValueError, "prior digest must be %d bytes, got %zd",
                     SHA256_DIGEST_BYTES, prior.len);
        goto done;
    }
    size_t num_pages = (size_t)units.len / UNIT_BYTES / (size_t)page_size;
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(num_pages * SHA256_DIGEST_BYTES));
    if (result == NULL || num_pages == 0) goto done;
    size_t longest_tail = (size_t)(first_tail.len > tail.len ? first_tail.len : tail.len);
    size_t most = (size_t)lead.len + SHA256_DIGEST_BYTES + (size_t)array_head.len +
                  9 * (size_t)page_size + longest_tail;
    scratch = malloc(sha256_padded_len(most));
    if (scratch == NULL) {
        Py_CLEAR(result);
        PyErr_NoMemory();
        goto done;
    }
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    const uint8_t *page = units.buf;
    const uint8_t *previous = prior.buf;
    sha256_compress_fn compress = fast_compress;
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

static PyObject *sha256(PyObject *module, PyObject *args) {
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
                         portable ? sha256_compress_portable : fast_compress);
    free(buf);
    PyBuffer_Release(&data);
    return PyBytes_FromStringAndSize((const char *)digest, SHA256_DIGEST_BYTES);
}

static PyObject *sha256_implementation(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return PyUnicode_FromString(fast_compress_name);
}

/* ------------------------------------------------------------------ row copies */
/* A transfer of this many bytes or more bypasses the caches (non-temporal stores): it is
 * larger than the caches hold, so normal stores would first read every destination line
 * only to evict it again (on the 2-core test VM, 32 KiB rows at random places: 7.4 GB/s
 * with memmove, 9.7 GB/s streaming, 10.2 GB/s for one contiguous memcpy). Smaller copies
 * keep the destination cached for whoever reads it next. */
#define STREAM_MIN_BYTES ((size_t)8 << 20)
#define STREAM_MIN_ROW_BYTES 1024 /* shorter rows: per-row set-up and partial lines */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <emmintrin.h>
#define HAVE_STREAMING 1

/* `n` bytes from `from` to `to` (not overlapping), the 16-byte-aligned middle of the
 * destination written with non-temporal stores (SSE2, part of x86-64). */
static void stream_copy(uint8_t *to, const uint8_t *from, size_t n) {
    size_t head = (16 - ((uintptr_t)to & 15)) & 15;
    if (head > n) head = n;
    memcpy(to, from, head);
    to += head, from += head, n -= head;
    for (; n >= 64; n -= 64, to += 64, from += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)from);
        __m128i b = _mm_loadu_si128((const __m128i *)(from + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(from + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(from + 48));
        _mm_stream_si128((__m128i *)to, a);
        _mm_stream_si128((__m128i *)(to + 16), b);
        _mm_stream_si128((__m128i *)(to + 32), c);
        _mm_stream_si128((__m128i *)(to + 48), d);
    }
    for (; n >= 16; n -= 16, to += 16, from += 16)
        _mm_stream_si128((__m128i *)to, _mm_loadu_si128((const __m128i *)from));
    memcpy(to, from, n);
}
#else
#define HAVE_STREAMING 0
#endif

static void copy_bytes(uint8_t *to, const uint8_t *from, size_t n, int streaming) {
#if HAVE_STREAMING
    int apart = to + n <= from || from + n <= to;
    if (streaming && apart) {
        stream_copy(to, from, n);
        return;
    }
#else
    (void)streaming;
#endif
    memmove(to, from, n);
}

/* A 2-D byte array as rows: `rows` rows of `row_bytes` bytes, `stride` bytes apart. */
typedef struct {
    Py_buffer view;
    Py_ssize_t rows, row_bytes, stride;
} Rows;

static int get_rows(PyObject *obj, int writable, Rows *out, Py_ssize_t index) {
    const char *what = writable ? "destination" : "source";
    if (PyObject_GetBuffer(obj, &out->view, PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0)))
        return -1;
    Py_buffer *v = &out->view;
    if (v->ndim != 2 || v->itemsize != 1 || v->strides[1] != 1) {
        PyErr_Format(PyExc_ValueError,
                     "pair %zd: the %s must be 2-D bytes with contiguous rows (ndim %d, "
                     "itemsize %zd)",
                     index, what, v->ndim, v->itemsize);
        PyBuffer_Release(v);
        return -1;
    }
    out->rows = v->shape[0];
    out->row_bytes = v->shape[1];
    out->stride = v->strides[0];
    if (out->rows > 1 && out->stride < out->row_bytes) {
        PyErr_Format(PyExc_ValueError, "pair %zd: %s rows overlap (stride %zd, row %zd bytes)",
                     index, what, out->stride, out->row_bytes);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

static void copy_runs(const Rows *src, const Rows *dst, const int64_t *runs, size_t num_runs,
                      int streaming) {
    const uint8_t *src_base = src->view.buf;
    uint8_t *dst_base = dst->view.buf;
    size_t row = (size_t)src->row_bytes;
    int packed = src->stride == src->row_bytes && dst->stride == dst->row_bytes;
    for (size_t r = 0; r < num_runs; r++) {
        const int64_t *run = runs + 3 * r;
        const uint8_t *from = src_base + run[0] * src->stride;
        uint8_t *to = dst_base + run[1] * dst->stride;
        if (packed) {
            copy_bytes(to, from, row * (size_t)run[2], streaming);
            continue;
        }
        for (int64_t k = 0; k < run[2]; k++, from += src->stride, to += dst->stride)
            copy_bytes(to, from, row, streaming);
    }
}

static PyObject *copy_row_runs(PyObject *module, PyObject *args) {
    PyObject *pairs;
    Py_buffer runs_view;
    int streaming = -1; /* -1: by size; 0: never; 1: always */
    (void)module;
    if (!PyArg_ParseTuple(args, "O!y*|i:copy_row_runs", &PyList_Type, &pairs, &runs_view,
                          &streaming))
        return NULL;
    Py_ssize_t num_pairs = PyList_GET_SIZE(pairs), ready = 0;
    Rows *rows = NULL;
    PyObject *result = NULL;
    if (runs_view.len % (3 * (Py_ssize_t)sizeof(int64_t))) {
        PyErr_Format(PyExc_ValueError, "runs must be int64 triples, got %zd bytes",
                     runs_view.len);
        goto done;
    }
    size_t num_runs = (size_t)runs_view.len / (3 * sizeof(int64_t));
    const int64_t *runs = runs_view.buf;
    rows = calloc(2 * (size_t)num_pairs + 1, sizeof(Rows));
    if (rows == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t src_rows = PY_SSIZE_T_MAX, dst_rows = PY_SSIZE_T_MAX;
    for (; ready < num_pairs; ready++) {
        PyObject *pair = PyList_GET_ITEM(pairs, ready);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_ValueError, "pair %zd is not a (source, destination) tuple",
                         ready);
            goto done;
        }
        Rows *src = &rows[2 * ready], *dst = &rows[2 * ready + 1];
        if (get_rows(PyTuple_GET_ITEM(pair, 0), 0, src, ready)) goto done;
        if (get_rows(PyTuple_GET_ITEM(pair, 1), 1, dst, ready)) {
            PyBuffer_Release(&src->view);
            goto done;
        }
        if (src->row_bytes != dst->row_bytes) {
            PyErr_Format(PyExc_ValueError, "pair %zd: source rows of %zd bytes, destination %zd",
                         ready, src->row_bytes, dst->row_bytes);
            PyBuffer_Release(&src->view);
            PyBuffer_Release(&dst->view);
            goto done;
        }
        src_rows = src->rows < src_rows ? src->rows : src_rows;
        dst_rows = dst->rows < dst_rows ? dst->rows : dst_rows;
    }
    size_t num_rows = 0, row_bytes = 0;
    for (size_t r = 0; num_pairs && r < num_runs; r++) {
        int64_t s = runs[3 * r], d = runs[3 * r + 1], k = runs[3 * r + 2];
        num_rows += (size_t)(k > 0 ? k : 0);
        if (k < 0 || s < 0 || d < 0 || s > src_rows - k || d > dst_rows - k) {
            PyErr_Format(PyExc_ValueError,
                         "run %zu (source row %lld, destination row %lld, %lld rows) is out "
                         "of range: %zd source rows, %zd destination rows",
                         r, (long long)s, (long long)d, (long long)k, src_rows, dst_rows);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < num_pairs; i++) row_bytes += (size_t)rows[2 * i].row_bytes;
    if (streaming < 0) {
        size_t shortest = (size_t)-1;
        for (Py_ssize_t i = 0; i < num_pairs; i++)
            if ((size_t)rows[2 * i].row_bytes < shortest) shortest = (size_t)rows[2 * i].row_bytes;
        streaming = num_rows * row_bytes >= STREAM_MIN_BYTES && shortest >= STREAM_MIN_ROW_BYTES;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < num_pairs; i++)
        copy_runs(&rows[2 * i], &rows[2 * i + 1], runs, num_runs, streaming);
#if HAVE_STREAMING
    if (streaming) _mm_sfence(); /* the streamed stores are seen before the caller's acks */
#endif
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; i < ready; i++) {
        PyBuffer_Release(&rows[2 * i].view);
        PyBuffer_Release(&rows[2 * i + 1].view);
    }
    free(rows);
    PyBuffer_Release(&runs_view);
    return result;
}

/* ------------------------------------------------------------------ module */
static PyMethodDef methods[] = {
    {"chain_digests", chain_digests, METH_VARARGS,
     "chain_digests(units, page_size, prior, bigram) -> bytes: the chained SHA-256 digest of "
     "every whole page of a packed key (see uniradix.page_hash), 32 bytes each."},
    {"cbor_chain_digests", cbor_chain_digests, METH_VARARGS,
     "cbor_chain_digests(units, page_size, prior, lead, array_head, first_tail, tail) -> "
     "bytes: vLLM's sha256_cbor digest of every whole page (see "
     "uniradix.events.hashing)."},
    {"sha256", sha256, METH_VARARGS,
     "sha256(data, portable) -> bytes: SHA-256 of data (portable: without the SHA "
     "extensions)."},
    {"sha256_implementation", sha256_implementation, METH_NOARGS,
     "The compression function chain_digests uses: 'sha_ni' or 'portable'."},
    {"copy_row_runs", copy_row_runs, METH_VARARGS,
     "copy_row_runs(pairs, runs, streaming=-1): for each (source, destination) pair of 2-D "
     "byte arrays, copies rows s..s+k-1 of the source to rows d..d+k-1 of the destination "
     "for every int64 triple (s, d, k) of runs; streaming: non-temporal stores (1), not (0), "
     "or by size (-1)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "uniradix._native",
    "Optional native loops of uniradix (see uniradix.native).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    fast_compress = sha256_select(&fast_compress_name);
    return PyModule_Create(&native_module);
}
