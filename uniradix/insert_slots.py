"""The slots of an insert: checking the caller's value, and which of its slots are duplicates.

An insert's `value` holds one full-KV slot per key unit. Where the tree already holds the key,
the caller's slots are duplicates and go back to the pool, except the tree's own slots passed
back (a request's row below its `prev_prefix_len`). Duplicates below the request's SWA cursor
have already lost their SWA peers, so only their full side is freed::

    units:  [start ........ swa_cursor) [swa_cursor ........ end)
    frees:   KV_FULL_ONLY                KV (full and SWA peer)
"""

from __future__ import annotations

import torch

from uniradix.types import FreeKind, FreeSlots, InsertParams


def checked_value(params: InsertParams, page_size: int) -> torch.Tensor:
    """`params.value`, or the key's units when it is None; raises on a malformed value."""
    value = params.value
    if value is None:
        return torch.tensor(params.key.tolist()[: len(params.key)], dtype=torch.int64)
    if not isinstance(value, torch.Tensor) or value.dtype != torch.int64 or value.dim() != 1:
        raise TypeError(f"value must be a 1-D int64 tensor, got {value!r:.80}")
    if value.shape[0] != len(params.key):
        raise ValueError(f"value has {value.shape[0]} slots for a key of {len(params.key)} units")
    ps = page_size
    n = len(params.key) // ps * ps
    if ps > 1 and n:
        pages = value[:n].view(-1, ps)
        if bool(((pages - pages[:, :1]) != torch.arange(ps, device=value.device)).any()) or bool(
            (pages[:, 0] % ps).any()
        ):
            raise ValueError(
                f"value is not made of whole pages of {ps} slots: {value[:n].tolist()[:32]}"
            )
    return value


def duplicate_frees(
    tree_slots: torch.Tensor,
    offset: int,
    start: int,
    end: int,
    value: torch.Tensor,
    swa_cursor: int,
) -> list[FreeSlots]:
    """Frees for the caller's slots of units `[start, end)` of a node at key `offset`, whose
    slots in the tree are `tree_slots`."""
    dup = value[offset + start : offset + end]
    not_own = dup != tree_slots[start:end]
    k = max(0, min(swa_cursor - offset - start, dup.shape[0]))
    frees = []
    for kind, part, mask in (
        (FreeKind.KV_FULL_ONLY, dup[:k], not_own[:k]),
        (FreeKind.KV, dup[k:], not_own[k:]),
    ):
        part = part[mask]
        if part.shape[0]:
            frees.append(FreeSlots(kind, part))
    return frees
