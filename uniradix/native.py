"""The optional native module `uniradix._native` (C, built from `uniradix/csrc/` at install),
behind typed, checked wrappers.

It runs these hot loops in one call each (the digests, the copies and long integer arrays
with the GIL released):

- `chain_digests`: the chained SHA-256 page digests of a packed key (`hashing.page`'s chain,
  byte for byte), with its own SHA-256 (on the CPU's SHA extensions where present), per
  node or for many nodes at once (`chain_digests_many`: one release of the GIL), and
  `cbor_chain_digests`, vLLM's `sha256_cbor` chain (`hashing.events`);
- `copy_row_runs`: one `memmove` per page row of every layer's K and V (or per run of rows
  contiguous on both sides), for the host tier's CPU copier (`tiers.copiers`), where torch
  needs a gather into a staging buffer and a scatter, two passes over the bytes;
- `free_slots`: the token allocator's checked free (`memory.allocator`): the pages of the
  given slots proved inside the pool, allocated and distinct, and pushed onto the free
  stack, in one pass where numpy takes a sort, several comparisons, a gather and a scatter
  (this one holds the GIL: it is short and mutates the allocator's state);
- `whole_pages` and `count_equal`: an insert's value checked for whole pages
  (`uniradix.slots`) and its duplicate slots counted against the tree's own
  (`cache.insert_slots`), one pass each where numpy makes temporary arrays;
- `walk_edges`: the radix tree's match walk (`tree.walk`) over a buffer read in place (an
  engine's token-id array needs no `bytes` copy);
- `cluster_slot_runs`: a batch of Redis key names as runs of one cluster slot
  (`storage.redis_slots`), one CRC per run where Python takes a slice and a CRC a name;
- `msgpack_ints`: a msgpack array of 64-bit integers read in place, for the KV events'
  tokens and hashes (`events.packed`), where msgspec needs a Python int per value.

`HAVE_NATIVE` says whether callers use it: False when the module was not built (no C
compiler at install: the build is optional) or when the environment sets
`UNIRADIX_NO_NATIVE=1`; the callers then run their pure-Python (torch, hashlib) paths, which
compute the same bytes. Callers read `HAVE_NATIVE` at each call, so a test can switch it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, NoReturn

import numpy as np
import torch
from typing_extensions import Buffer

_module: ModuleType | None
try:
    from uniradix import _native as _module
except ImportError:  # built without a C compiler: the pure-Python paths run
    _module = None

DISABLED = os.environ.get("UNIRADIX_NO_NATIVE", "") not in ("", "0")
BUILT = _module is not None
HAVE_NATIVE = BUILT and not DISABLED
DIGEST_BYTES = 32


def _get() -> ModuleType:
    if _module is None:
        raise RuntimeError("uniradix._native was not built (see docs/native.md)")
    return _module


def sha256_implementation() -> str:
    """The SHA-256 compression the native chain runs: "sha_ni" or "portable"."""
    return str(_get().sha256_implementation())


def sha256(data: bytes, portable: bool = False) -> bytes:
    """SHA-256 of `data` by the native code (`portable`: without the SHA extensions); for
    tests against `hashlib`."""
    return bytes(_get().sha256(data, portable))


def chain_digests(units: bytes, page_size: int, prior: bytes | None, bigram: bool) -> bytes:
    """`hashing.page.chain_digests` computed natively: the 32-byte digest of every whole page of
    `units` (packed int64 little-endian units), chained from `prior`, concatenated."""
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    if prior is not None and len(prior) != DIGEST_BYTES:
        raise ValueError(f"prior digest must be {DIGEST_BYTES} bytes, got {len(prior)}")
    return bytes(_get().chain_digests(units, page_size, prior, bigram))


def chain_digests_many(
    units: list[bytes], priors: list[bytes | int | None], page_size: int, bigram: bool
) -> list[bytes]:
    """`chain_digests` of many nodes, the GIL released once: node `i` hashes `units[i]`
    chained from `priors[i]`, a digest, None (an unseeded root) or the index of an earlier
    node (its last digest; a node without whole pages passes its own prior on)."""
    blobs: list[bytes] = _get().chain_digests_many(units, priors, page_size, bigram)
    return blobs


def cbor_chain_digests(
    units: bytes, page_size: int, prior: bytes, parts: tuple[bytes, bytes, bytes, bytes]
) -> bytes:
    """vLLM's `sha256_cbor` chain (`hashing.events.VllmCborHasher`) computed natively: page
    `p`'s digest is SHA-256 of `lead || prior || array_head || its units as CBOR unsigned
    integers || (first_tail if p == 0 else tail)`, `parts` being
    `(lead, array_head, first_tail, tail)`. Units must be >= 0 (the caller checks)."""
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    if len(prior) != DIGEST_BYTES:
        raise ValueError(f"prior digest must be {DIGEST_BYTES} bytes, got {len(prior)}")
    return bytes(_get().cbor_chain_digests(units, page_size, prior, *parts))


def copy_row_runs(
    pairs: Sequence[tuple[torch.Tensor, torch.Tensor]],
    runs: np.ndarray,
    streaming: bool | None = None,
) -> int:
    """For each `(source, destination)` pair of 2-D CPU tensors with contiguous rows of the
    same bytes, copies rows `s .. s+k-1` of the source to rows `d .. d+k-1` of the
    destination for every row `(s, d, k)` of `runs` (`[n, 3]` integers, e.g.
    `row_runs.common_runs`). Returns the bytes copied. Raises ValueError for a tensor not on
    the CPU, not 2-D, with non-contiguous rows, of another dtype or row length than its
    pair, or a run out of range of any pair.

    `streaming`: write with non-temporal stores (bypassing the caches), or not; None lets
    the size decide (on for copies of 8 MiB or more in rows of 1 KiB or more, on x86-64)."""
    runs = np.ascontiguousarray(runs, dtype=np.int64)
    if runs.ndim != 2 or runs.shape[1] != 3:
        raise ValueError(
            f"runs must be [n, 3] (source row, destination row, length), got {runs.shape}"
        )
    arrays = [_byte_rows(src, dst, i) for i, (src, dst) in enumerate(pairs)]
    if not arrays or not len(runs):
        return 0
    src_rows = min(int(s.shape[0]) for s, _ in arrays)
    dst_rows = min(int(d.shape[0]) for _, d in arrays)
    starts_s, starts_d, lengths = runs[:, 0], runs[:, 1], runs[:, 2]
    bad = (lengths < 0) | (starts_s < 0) | (starts_d < 0)
    bad |= (starts_s + lengths > src_rows) | (starts_d + lengths > dst_rows)
    if bad.any():
        s, d, k = runs[int(np.argmax(bad))].tolist()
        raise ValueError(
            f"run of {k} rows from source row {s} to destination row {d} is out of range "
            f"({src_rows} source rows, {dst_rows} destination rows)"
        )
    _get().copy_row_runs(arrays, runs, -1 if streaming is None else int(streaming))
    return int(lengths.sum()) * sum(int(src.shape[1]) for src, _ in arrays)


def free_slots(
    slots: np.ndarray,
    page_size: int,
    in_use: np.ndarray,
    stack: np.ndarray,
    top: int,
    node_value: bool,
) -> int | None:
    """Frees the pages holding `slots` (1-D int64) of a `TokenSlotAllocator` whose state is
    `in_use` (a bool flag per page, page 0 first), `stack` (its free pages) and `top` (how
    many of them are free), pushing them as `TokenSlotAllocator.free_pages(checked_pages(
    ...))` does. Returns the new `top`, or None, with nothing changed, when `checked_pages`
    would raise (a page outside the pool or not allocated, a slot given twice at page size
    1): the caller then runs it for its error. Raises ValueError for buffers not of those
    types and shapes, or a page of a node value given twice (its contract)."""
    new_top = _get().free_slots(slots, page_size, in_use, stack, top, node_value)
    return None if new_top < 0 else new_top


def count_equal(a: np.ndarray, b: np.ndarray) -> int:
    """At how many positions `a` and `b` (1-D int64, one length) hold the same value:
    `np.count_nonzero(a == b)` without the mask."""
    return int(_get().count_equal(a, b))


def whole_pages(slots: np.ndarray, page_size: int) -> bool:
    """Whether `slots` (1-D int64, a multiple of `page_size` long) is whole pages: the
    answer of `uniradix.slots.whole_pages`'s numpy path, in one pass."""
    return bool(_get().whole_pages(slots, page_size))


def msgpack_ints(values: np.ndarray) -> bytes:
    """The msgpack array of the 1-D int64 or uint64 `values`, msgspec's bytes for the same
    Python ints (`events.packed.msgpack_ints`), read in place."""
    if values.ndim != 1 or values.dtype.kind not in "iu" or values.dtype.itemsize != 8:
        raise ValueError(f"values must be a 1-D 64-bit integer array, got {values.dtype}")
    native_order = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("="))
    return bytes(_get().msgpack_ints(native_order, values.dtype.kind == "u"))


def _byte_rows(src: torch.Tensor, dst: torch.Tensor, index: int) -> tuple[np.ndarray, np.ndarray]:
    """The pair as 2-D uint8 arrays over the same memory (a view, no copy)."""
    for what, t in (("source", src), ("destination", dst)):
        if t.device.type != "cpu":
            raise ValueError(f"pair {index}: the {what} is on {t.device}, not the CPU")
        if t.dim() != 2:
            raise ValueError(f"pair {index}: the {what} has {t.dim()} dimensions, not 2")
        if t.shape[1] > 1 and t.stride(1) != 1:
            raise ValueError(f"pair {index}: the {what}'s rows are not contiguous ({t.stride()})")
    if src.dtype != dst.dtype or src.shape[1] != dst.shape[1]:
        raise ValueError(
            f"pair {index}: source rows {src.shape[1]} x {src.dtype}, destination rows "
            f"{dst.shape[1]} x {dst.dtype}"
        )
    return _as_bytes(src), _as_bytes(dst)


def _as_bytes(t: torch.Tensor) -> np.ndarray:
    if t.shape[1] == 1 and t.stride(1) != 1:  # a 1-wide row: any stride is contiguous
        t = t.as_strided(t.shape, (t.stride(0), 1))
    return t.detach().view(torch.uint8).numpy()


def _not_built(*args: object) -> NoReturn:
    raise RuntimeError("uniradix._native was not built (see docs/native.md)")


walk_edges: Callable[[object, Buffer, int, int, object], tuple[list[Any], int, Any]] = (
    _module.walk_edges if _module is not None else _not_built
)
"""`uniradix.tree.walk.walk_edges` computed natively over any buffer of packed units, read in
place: the C function itself, with no wrapper (a match runs on every request; the C side
checks its arguments)."""


def cluster_slot_runs(names: Sequence[str]) -> tuple[list[int], list[int]]:
    """The first index and the Redis Cluster slot of each run of consecutive `names` in one
    slot (`storage.redis_slots.key_slot` of each name's UTF-8 bytes)."""
    runs: tuple[list[int], list[int]] = _get().cluster_slot_runs(
        names if isinstance(names, list) else list(names)
    )
    return runs
