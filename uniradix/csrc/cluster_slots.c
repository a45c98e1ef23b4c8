/* cluster_slot_runs: a batch of Redis key names as runs of consecutive names in one cluster
 * slot (`uniradix.storage.redis_slots.slot_runs`).
 *
 * A cluster hashes a key's first non-empty {hash tag}, or the whole key without one, with
 * CRC16-CCITT (XMODEM, Python's binascii.crc_hqx from 0) mod 16,384. A chain's pages share a
 * tag per group of pages, so a name whose hashed part equals the one before is in its slot
 * without a CRC: one memchr pair and one memcmp a name, where numpy took several passes over
 * the encoded batch and Python a slice and a CRC call a name. Holds the GIL (it reads the
 * names' own bytes and calls nothing back). */
#include "native.h" /* first: it includes Python.h, which must precede the C headers */

#include <stdint.h>
#include <string.h>

#define CLUSTER_SLOTS 16384

static uint16_t crc_table[256];
static int crc_table_ready = 0;

static void fill_crc_table(void) {
    for (int byte = 0; byte < 256; byte++) {
        uint16_t crc = (uint16_t)(byte << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
        crc_table[byte] = crc;
    }
    crc_table_ready = 1;
}

static long crc16_slot(const char *data, Py_ssize_t len) {
    uint16_t crc = 0;
    for (Py_ssize_t i = 0; i < len; i++)
        crc = (uint16_t)((crc << 8) ^ crc_table[((crc >> 8) ^ (unsigned char)data[i]) & 0xff]);
    return crc % CLUSTER_SLOTS;
}

/* The part of `name` a cluster hashes: the first {tag} when not empty, else all of it. */
static const char *hashed_part(const char *name, Py_ssize_t len, Py_ssize_t *part_len) {
    const char *open = memchr(name, '{', (size_t)len);
    if (open != NULL) {
        const char *after = open + 1, *end = name + len;
        const char *close = memchr(after, '}', (size_t)(end - after));
        if (close != NULL && close > after) {
            *part_len = close - after;
            return after;
        }
    }
    *part_len = len;
    return name;
}

/* cluster_slot_runs(names) -> (starts, slots): for a list of str, the index of the first
 * name of each run of consecutive names in one slot, and that slot; names are hashed as
 * their UTF-8 bytes (what the client sends). */
PyObject *native_cluster_slot_runs(PyObject *module, PyObject *names) {
    (void)module;
    if (!PyList_Check(names)) return PyErr_Format(PyExc_TypeError, "names must be a list");
    if (!crc_table_ready) fill_crc_table();
    PyObject *starts = PyList_New(0), *slots = PyList_New(0);
    if (starts == NULL || slots == NULL) goto fail;
    const char *prev = NULL;
    Py_ssize_t prev_len = 0;
    long prev_slot = -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(names); i++) {
        PyObject *item = PyList_GET_ITEM(names, i);
        if (!PyUnicode_Check(item)) {
            PyErr_Format(PyExc_TypeError, "names[%zd] is %.100s, not str", i,
                         Py_TYPE(item)->tp_name);
            goto fail;
        }
        Py_ssize_t len, part_len;
        const char *name = PyUnicode_AsUTF8AndSize(item, &len);
        if (name == NULL) goto fail;
        const char *part = hashed_part(name, len, &part_len);
        /* The list holds every name, so `prev` stays valid while the loop runs. */
        if (prev != NULL && part_len == prev_len && memcmp(part, prev, (size_t)part_len) == 0)
            continue;
        long slot = crc16_slot(part, part_len);
        prev = part;
        prev_len = part_len;
        if (slot == prev_slot) continue;
        prev_slot = slot;
        PyObject *start = PyLong_FromSsize_t(i), *value = PyLong_FromLong(slot);
        int failed = start == NULL || value == NULL || PyList_Append(starts, start) ||
                     PyList_Append(slots, value);
        Py_XDECREF(start);
        Py_XDECREF(value);
        if (failed) goto fail;
    }
    PyObject *result = PyTuple_Pack(2, starts, slots);
    Py_DECREF(starts);
    Py_DECREF(slots);
    return result;
fail:
    Py_XDECREF(starts);
    Py_XDECREF(slots);
    return NULL;
}
