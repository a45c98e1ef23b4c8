/* The host tier's CPU row copy: rows (or runs of rows) of 2-D byte arrays copied between
 * buffers with the GIL released, every index checked against the buffers first. */
#include "native.h" /* first: it includes Python.h, which must precede the C headers */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

PyObject *native_copy_row_runs(PyObject *module, PyObject *args) {
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
