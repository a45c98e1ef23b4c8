/* uniradix._native: the hot loops the pure-Python code cannot run in one pass.
 *
 * - page_digests.c: chain_digests, SGLang's chained SHA-256 of every whole page of a packed
 *   key (the encoding of `uniradix/page_hash.py`, byte for byte), one call per node or
 *   many nodes per call (chain_digests_many), and
 *   cbor_chain_digests, vLLM's sha256_cbor chain (`uniradix/events/hashing.py`), on
 *   sha256.c;
 * - row_copy.c: copy_row_runs, one copy per row (or per run of rows contiguous on both
 *   sides) of every (source, destination) pair of 2-D byte arrays, for the host tier's CPU
 *   copier;
 * - page_free.c: free_slots, the token allocator's checked free (range, allocated,
 *   distinct) and push onto its free stack in one pass;
 * - slot_checks.c: whole_pages, the page test of an insert's value, and count_equal, an
 *   insert's duplicate slots against the tree's own;
 * - tree_walk.c: walk_edges, the radix tree's match walk over a buffer read in place;
 * - cluster_slots.c: cluster_slot_runs, a batch of Redis key names as runs of one cluster
 *   slot;
 * - msgpack_ints.c: msgpack_ints, a msgpack array of 64-bit integers (the KV events'
 *   tokens and hashes) read in place, msgspec's bytes without a Python int per value.
 *
 * The digests and the copy release the GIL while they work (the free holds it: see
 * page_free.c); all check every index against the buffers they were
 * given, whatever the Python wrapper (`uniradix/native.py`) already checked. This file holds
 * the module table and picks the SHA-256 compression function at import. */
#include "native.h"

sha256_compress_fn native_compress = sha256_compress_portable;
const char *native_compress_name = "portable";

/* ------------------------------------------------------------------ module */
static PyMethodDef methods[] = {
    {"chain_digests", native_chain_digests, METH_VARARGS,
     "chain_digests(units, page_size, prior, bigram) -> bytes: the chained SHA-256 digest of "
     "every whole page of a packed key (see uniradix.page_hash), 32 bytes each."},
    {"chain_digests_many", native_chain_digests_many, METH_VARARGS,
     "chain_digests_many(units, priors, page_size, bigram) -> list[bytes]: chain_digests of "
     "many nodes, the GIL released once; priors[i] is None, a digest, or the index of an "
     "earlier node to chain from."},
    {"cbor_chain_digests", native_cbor_chain_digests, METH_VARARGS,
     "cbor_chain_digests(units, page_size, prior, lead, array_head, first_tail, tail) -> "
     "bytes: vLLM's sha256_cbor digest of every whole page (see "
     "uniradix.events.hashing)."},
    {"sha256", native_sha256, METH_VARARGS,
     "sha256(data, portable) -> bytes: SHA-256 of data (portable: without the SHA "
     "extensions)."},
    {"sha256_implementation", native_sha256_implementation, METH_NOARGS,
     "The compression function chain_digests uses: 'sha_ni' or 'portable'."},
    {"copy_row_runs", native_copy_row_runs, METH_VARARGS,
     "copy_row_runs(pairs, runs, streaming=-1): for each (source, destination) pair of 2-D "
     "byte arrays, copies rows s..s+k-1 of the source to rows d..d+k-1 of the destination "
     "for every int64 triple (s, d, k) of runs; streaming: non-temporal stores (1), not (0), "
     "or by size (-1)."},
    {"free_slots", native_free_slots, METH_VARARGS,
     "free_slots(slots, page_size, in_use, stack, top, node_value) -> int: frees the pages "
     "holding slots onto the stack (see uniradix.memory.allocator); the new top, or -1, "
     "changing nothing, when a page is out of range, not allocated or (page size 1) given "
     "twice."},
    {"count_equal", native_count_equal, METH_VARARGS,
     "count_equal(a, b) -> int: at how many positions two 1-D int64 buffers of one length "
     "hold the same value."},
    {"walk_edges", (PyCFunction)(void (*)(void))native_walk_edges, METH_FASTCALL,
     "walk_edges(root, units, num_bytes, page_bytes, namespace) -> (path, offset, diverged): "
     "the tree's match walk over the first num_bytes of a buffer (see uniradix.tree.walk)."},
    {"whole_pages", (PyCFunction)(void (*)(void))native_whole_pages, METH_FASTCALL,
     "whole_pages(slots, page_size) -> bool: whether a 1-D int64 buffer, a multiple of "
     "page_size long, is whole pages (see uniradix.slots.whole_pages)."},
    {"msgpack_ints", native_msgpack_ints, METH_VARARGS,
     "msgpack_ints(values, is_unsigned) -> bytes: the msgpack array of a contiguous buffer "
     "of native 64-bit integers, each in its shortest form (msgspec's bytes)."},
    {"cluster_slot_runs", native_cluster_slot_runs, METH_O,
     "cluster_slot_runs(names) -> (starts, slots): the first index and the Redis Cluster slot "
     "of each run of consecutive names (a list of str) in one slot."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "uniradix._native",
    "Optional native loops of uniradix (see uniradix.native).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    native_compress = sha256_select(&native_compress_name);
    return PyModule_Create(&native_module);
}
