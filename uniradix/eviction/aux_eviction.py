"""What the eviction orders of the auxiliary pools (SWA windows, Mamba states) share: the
component they read, the compute a prefix saves, and the test for a state no match can use.

Compute saved by a hit of `p` tokens is `prefix_cost(p)`: linear weights plus quadratic
attention, `p * (1 + p / QUADRATIC_TOKENS)`, whose ratio is a 4096-wide model's
(`uniradix.sim.compute`: 24 h^2 per token and layer for the weights, 2 h per key pair for
attention, so the two are equal at `12 h` tokens). Deep checkpoints save more than shallow
ones, so a credit order keeps them longer.

An *unusable* node cannot end any match now: its end lacks `W` live SWA tokens before it (a
tombstone is closer than one window), and (for the SWA component itself) no live child could
still use its tokens; on full+SWA+Mamba a Mamba state there serves nothing, so the Mamba
order evicts it before any other (`uniradix.eviction.mamba_credit`).
"""

from __future__ import annotations

from typing import Protocol

from uniradix.tree.core import TreeCore
from uniradix.tree.lru import LRUList
from uniradix.tree.node import TreeNode


class EvictingComponent(Protocol):
    index: int
    tree: TreeCore
    lru: LRUList


WINDOW = 64  # least recent (or least credited) nodes an order looks at for a preferred victim
QUADRATIC_TOKENS = 12 * 4096


def prefix_cost(num_tokens: int) -> float:
    return num_tokens * (1.0 + num_tokens / QUADRATIC_TOKENS)


def unusable(tree: TreeCore, node: TreeNode, own_index: int, swa_index: int, window: int) -> bool:
    """Whether no match can end at `node` now (module docstring): the SWA component at
    `swa_index` (of `window` tokens) lacks one live window above `node`'s end, and, when the
    asking component is that SWA component (`own_index`), no live child could use it."""
    covered = 0
    for n in tree.path_to_root(node):
        if n.data[swa_index].value is None:
            break
        covered += n.num_tokens
        if covered >= window:
            return False
    else:
        return False  # live up to the root: every boundary on the path is valid
    if swa_index != own_index:
        return True
    return not any(c.data[swa_index].value is not None for c in node.children.values())
