"""Resumable prefix: how much of a request an instance can really skip, from its events.

Full pages alone do not make a hit on a hybrid model. The cache resumes a request at a page
boundary only where every component can continue from it (the rule its match, and L3
prefetch, apply):

- full attention: every page up to the boundary is held;
- a sliding window of W tokens: the pages holding the W tokens before the boundary have
  live SWA KV (`ceil(W / page)` pages, or all of them near the start);
- Mamba: a state sits at the boundary (the group holds the boundary's last page).

`resumable_pages` returns the deepest such boundary; with no auxiliary groups it is the
full-attention prefix, what a full-only stream promises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass

KIND_MAMBA = "mamba"


@dataclass(frozen=True)
class GroupPages:
    """One auxiliary group's pages on the media looked at: `kind` (`sliding_window` or
    `mamba`), `window` in tokens for SWA."""

    kind: str
    window: int | None
    pages: Sequence[Set[int]]  # one set per medium; a page counts if any holds it


def _membership(sets: Sequence[Set[int]]) -> Callable[[int], bool]:
    """`h in` any of `sets`, as one call (the common single medium: the set's own)."""
    if len(sets) == 1:
        return sets[0].__contains__
    return lambda h: any(h in s for s in sets)


def full_prefix_pages(hashes: Sequence[int], full: Sequence[Set[int]]) -> int:
    """Leading pages of `hashes` held in any of the `full` sets."""
    held = _membership(full)
    n = 0
    for h in hashes:
        if not held(h):
            break
        n += 1
    return n


def resumable_pages(
    hashes: Sequence[int],
    full: Sequence[Set[int]],
    groups: Sequence[GroupPages],
    page_size: int,
) -> int:
    """The deepest page boundary of `hashes` (a request's page hashes from the root) where
    the full pages are held and every group can resume (module doc)."""
    limit = full_prefix_pages(hashes, full)
    if not groups or limit == 0:
        return limit
    states = [_membership(g.pages) for g in groups if g.kind == KIND_MAMBA]
    windows = [
        (_membership(g.pages), -(-(g.window or 0) // page_size))
        for g in groups
        if g.kind != KIND_MAMBA
    ]
    best = 0
    runs = [0] * len(windows)  # per SWA group: consecutive live pages ending here
    for p in range(1, limit + 1):
        h = hashes[p - 1]
        ok = all(held(h) for held in states)
        for i, (held, need) in enumerate(windows):
            runs[i] = runs[i] + 1 if held(h) else 0
            ok = ok and runs[i] >= min(need, p)
        if ok:
            best = p
    return best
