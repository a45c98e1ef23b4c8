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

from collections.abc import Sequence, Set
from dataclasses import dataclass

KIND_MAMBA = "mamba"


@dataclass(frozen=True)
class GroupPages:
    """One auxiliary group's pages on the media looked at: `kind` (`sliding_window` or
    `mamba`), `window` in tokens for SWA."""

    kind: str
    window: int | None
    pages: Sequence[Set[int]]  # one set per medium; a page counts if any holds it

    def holds(self, h: int) -> bool:
        return any(h in p for p in self.pages)


def full_prefix_pages(hashes: Sequence[int], full: Sequence[Set[int]]) -> int:
    """Leading pages of `hashes` held in any of the `full` sets."""
    n = 0
    for h in hashes:
        if not any(h in blocks for blocks in full):
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
    best = 0
    runs = [0] * len(groups)  # per SWA group: consecutive live pages ending here
    for p in range(1, limit + 1):
        h = hashes[p - 1]
        ok = True
        for i, g in enumerate(groups):
            held = g.holds(h)
            if g.kind == KIND_MAMBA:
                ok = ok and held
                continue
            runs[i] = runs[i] + 1 if held else 0
            need = -(-(g.window or 0) // page_size)
            ok = ok and runs[i] >= min(need, p)
        if ok:
            best = p
    return best
