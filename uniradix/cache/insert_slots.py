"""The slots of an insert: checking the caller's value, and which of its slots are duplicates.

An insert's `value` holds one full-KV slot per key unit. Where the tree already holds the key,
the caller's slots are duplicates and go back to the pool, except the tree's own slots passed
back (a request's row below its `prev_prefix_len`). Duplicates below the request's SWA cursor
have already lost their SWA peers, so only their full side is freed::

    units:  [start ........ swa_cursor) [swa_cursor ........ end)
    frees:   KV_FULL_ONLY                KV (full and SWA peer)
"""

from __future__ import annotations

import numpy as np
import torch

from uniradix import native
from uniradix.cache.paths import span_slots
from uniradix.slots import int64_operand, whole_pages
from uniradix.tree.node import TreeNode
from uniradix.types import FreeKind, FreeSlots, InsertParams, Slots

NATIVE_DEDUP_MAX_PAGES = 128
"""Duplicate pages an insert frees with no distinct-pages proof when the native module is
present (measured crossover at page 16: 128 pages, 3.7 µs either way; 8 pages 0.7 against 3.0)."""


def checked_value(params: InsertParams, page_size: int) -> Slots:
    """`params.value` as host slots (or the key's units when it is None), after checking it
    is whole pages and that `params.mamba_value`, if any, is one state slot.

    On the CPU the result may view the caller's tensor (a request row): the cache copies
    what the tree keeps. Only `value[prev_prefix_len:]` is checked for whole pages: below it
    are the tree's own slots handed back, which the tree neither adopts nor frees."""
    mamba = params.mamba_value
    if mamba is not None and (
        not isinstance(mamba, torch.Tensor) or mamba.dtype != torch.int64 or mamba.shape != (1,)
    ):
        raise TypeError(f"mamba_value must be a [1] int64 tensor, got {mamba!r:.80}")
    tensor = params.value
    if tensor is None:
        return np.array(params.key.tolist(), dtype=np.int64)
    if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.int64 or tensor.dim() != 1:
        raise TypeError(f"value must be a 1-D int64 tensor, got {tensor!r:.80}")
    value: Slots = tensor.numpy() if tensor.is_cpu else tensor.cpu().numpy()
    num_units = params.key.start + (len(params.key.units) >> 3)  # `len(params.key)` inline
    if value.shape[0] != num_units:
        raise ValueError(f"value has {value.shape[0]} slots for a key of {num_units} units")
    n = num_units - num_units % page_size
    first = min(max(params.prev_prefix_len, 0) // page_size * page_size, n)
    if page_size > 1 and first < n:
        # No view when the whole value is checked (a fresh request's insert): a numpy call
        # per insert, which costs most when the caches are cold between requests.
        checked = value if first == 0 and n == num_units else value[first:n]
        if not whole_pages(checked, page_size):
            raise ValueError(
                f"value is not made of whole pages of {page_size} slots: {checked.tolist()[:32]}"
            )
    return value


def duplicate_frees(
    node: TreeNode,
    num_units: int,
    offset: int,
    start: int,
    end: int,
    value: Slots,
    swa_cursor: int,
    page_size: int,
    num_pages: int,
) -> list[FreeSlots]:
    """Frees for the caller's slots of units `[start, end)` of the `num_units` units at key
    `offset` that end with `node`; the pool has pages `1..num_pages`."""
    dup = value[offset + start : offset + end]
    num = dup.shape[0]
    if not num:
        return []
    tree_slots = node.data[0].value if node.num_tokens == num_units else None
    own = (span_slots(node, num_units) if tree_slots is None else tree_slots)[start:end]
    k = max(0, min(swa_cursor - offset - start, num))
    if k == 0 and page_size > 1 and (offset + start) % page_size == 0 and num % page_size == 0:
        # Page-aligned whole pages on both sides (the caller's: `checked_value`; the tree's:
        # node values): a page of `dup` shares no slot with the tree's page at its position
        # unless their first slots are equal, so one slot per page decides.
        firsts = dup[::page_size]
        if _none_equal(firsts, own[::page_size]):
            # For a few pages the native free's own check and dedup (one C pass over the
            # slots) costs less than proving the pages distinct here with numpy calls; for
            # long spans the proof's pass over pages, not slots, wins.
            whole = (
                not native.HAVE_NATIVE or firsts.shape[0] > NATIVE_DEDUP_MAX_PAGES
            ) and _distinct_pages(firsts, page_size, num_pages)
            return [FreeSlots(FreeKind.KV, dup, node_value=whole)]
    if k == 0 and _none_equal(dup, own):
        # None are the tree's own and none lost their SWA peers.
        return [FreeSlots(FreeKind.KV, dup)]
    not_own = dup != own
    frees = []
    for kind, part, mask in (
        (FreeKind.KV_FULL_ONLY, dup[:k], not_own[:k]),
        (FreeKind.KV, dup[k:], not_own[k:]),
    ):
        part = part[mask]
        if part.shape[0]:
            frees.append(FreeSlots(kind, part))
    return frees


def _none_equal(caller: Slots, tree: Slots) -> bool:
    """Whether no position of `caller` holds the tree's slot at that position (one native
    pass where present; numpy makes a mask and counts it)."""
    if native.HAVE_NATIVE:
        return native.count_equal(caller, tree) == 0
    return bool(np.count_nonzero(caller != tree) == caller.shape[0])


def _distinct_pages(firsts: Slots, page_size: int, num_pages: int) -> bool:
    """Whether `firsts`, the first slots of whole pages of an insert's value, are distinct
    pages of the pool. Then their free may skip the allocator's per-slot sort and dedup
    (`node_value`): one sort of the pages here, 1/page_size of the work. Otherwise the
    allocator checks them as any caller's slots (and raises or dedups as it always did).
    With the native module, only for spans over `NATIVE_DEDUP_MAX_PAGES` pages."""
    pages = firsts // int64_operand(page_size)  # a new array: sorted in place (no np.sort copy)
    pages.sort(kind="stable")  # timsort: near linear on the runs of pages allocations hand out
    if pages[0] < 1 or pages[-1] > num_pages:
        return False
    return bool(np.count_nonzero(pages[1:] - pages[:-1]) == pages.shape[0] - 1)
