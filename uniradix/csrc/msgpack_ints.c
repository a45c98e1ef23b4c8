/* msgpack_ints: a msgpack array of 64-bit integers, for the KV events' token ids and block
 * hashes (`uniradix/events/packed.py`). The pure-Python path makes a Python int per value
 * and lets msgspec encode the list (~0.5 ms for a Mooncake request's 12,600 tokens, and as
 * many objects through the allocator and the CPU caches); this reads the array in place.
 *
 * The bytes are msgspec's, which writes every integer in its shortest form: 0..127 and
 * -32..-1 as one byte; else a head (0xcc-0xcf unsigned for values >= 0, 0xd0-0xd3 signed
 * for negative ones) and 1, 2, 4 or 8 big-endian bytes. The array head is 0x90 | n below
 * 16 items, 0xdc + 2 bytes below 65,536, else 0xdd + 4 bytes. */
#include "native.h"

#include <stdint.h>
#include <string.h>

/* From this many integers on, the loops run without the GIL. */
#define RELEASE_GIL_FROM 4096

/* Bytes `value` takes after its head (0: the head is the value), and its head. */
static int signed_width(int64_t value, uint8_t *head) {
    if (value >= 0) {
        uint64_t u = (uint64_t)value;
        if (u < 128) { *head = (uint8_t)u; return 0; }
        if (u < (1u << 8)) { *head = 0xcc; return 1; }
        if (u < (1u << 16)) { *head = 0xcd; return 2; }
        if (u < (UINT64_C(1) << 32)) { *head = 0xce; return 4; }
        *head = 0xcf;
        return 8;
    }
    if (value >= -32) { *head = (uint8_t)(value & 0xff); return 0; }
    if (value >= INT8_MIN) { *head = 0xd0; return 1; }
    if (value >= INT16_MIN) { *head = 0xd1; return 2; }
    if (value >= INT32_MIN) { *head = 0xd2; return 4; }
    *head = 0xd3;
    return 8;
}

static int unsigned_width(uint64_t u, uint8_t *head) {
    if (u < 128) { *head = (uint8_t)u; return 0; }
    if (u < (1u << 8)) { *head = 0xcc; return 1; }
    if (u < (1u << 16)) { *head = 0xcd; return 2; }
    if (u < (UINT64_C(1) << 32)) { *head = 0xce; return 4; }
    *head = 0xcf;
    return 8;
}

/* Writes one integer at `out`; returns the bytes written (1 to 9). */
static size_t value_bytes(uint64_t bits, int is_unsigned, uint8_t *out) {
    uint8_t head;
    int width = is_unsigned ? unsigned_width(bits, &head) : signed_width((int64_t)bits, &head);
    out[0] = head;
    for (int i = 0; i < width; i++) /* the low `width` bytes, most significant first */
        out[1 + i] = (uint8_t)(bits >> (8 * (width - 1 - i)));
    return 1 + (size_t)width;
}

/* msgpack_ints(values, is_unsigned): `values` a C-contiguous buffer of native-order 64-bit
 * integers (signed, or unsigned when `is_unsigned`). */
PyObject *native_msgpack_ints(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer values;
    int is_unsigned;
    if (!PyArg_ParseTuple(args, "y*p:msgpack_ints", &values, &is_unsigned)) return NULL;
    PyObject *result = NULL;
    if (values.len % 8 != 0) {
        PyErr_Format(PyExc_ValueError, "msgpack_ints: %zd bytes is not a whole number of "
                     "64-bit integers", values.len);
        goto done;
    }
    Py_ssize_t count = values.len / 8;
    if (count > (Py_ssize_t)UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "msgpack_ints: %zd integers do not fit an array", count);
        goto done;
    }
    const uint8_t *in = values.buf;
    /* Written into a buffer of the most it can take (an array head of 5 bytes, 9 per
     * integer), then copied into the bytes object: the loop then needs no GIL, and a long
     * array (a request's tokens) lets the scheduler's thread run meanwhile (the sender
     * thread calls this; both buffers are this call's alone). */
    uint8_t *buffer = PyMem_RawMalloc(5 + 9 * (size_t)count);
    if (buffer == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int release = count >= RELEASE_GIL_FROM;
    PyThreadState *saved = release ? PyEval_SaveThread() : NULL;
    uint8_t *out = buffer;
    if (count < 16) {
        *out++ = (uint8_t)(0x90 | count);
    } else if (count < 65536) {
        *out++ = 0xdc;
        *out++ = (uint8_t)(count >> 8);
        *out++ = (uint8_t)count;
    } else {
        *out++ = 0xdd;
        for (int i = 0; i < 4; i++) *out++ = (uint8_t)((uint64_t)count >> (24 - 8 * i));
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        uint64_t bits;
        memcpy(&bits, in + 8 * i, sizeof bits);
        out += value_bytes(bits, is_unsigned, out);
    }
    if (release) PyEval_RestoreThread(saved);
    result = PyBytes_FromStringAndSize((const char *)buffer, out - buffer);
    PyMem_RawFree(buffer);
done:
    PyBuffer_Release(&values);
    return result;
}
