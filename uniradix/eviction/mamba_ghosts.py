"""Ghosts of Mamba states that left the tree with their full KV, for the default order
(`uniradix.eviction.mamba_probation`).

The default reads the full KV, which outlives the states, as the ghost list ARC keeps apart:
a state stored under a prefix another request passed over, or below a state a match resumed
from, shows reuse and is spared probation. When a state goes *with* its full KV (its node is
an evictable leaf and leaves the tree), that evidence goes too: the prefix, stored again by
the next request that computes it, looks fresh, goes on probation, and, often covered at once
by the same request's deeper state, is the cheapest state there. That is how a shared system
prompt's state is lost under a tight full pool while one-off prompts' states stay (issue 28's
full+SWA+Mamba `agentic_interfered/s1` tight cell, `python -m
benchmarks.studies.mamba_victims`).

So a state that showed reuse (a match resumed from it, or it came back from a ghost) leaves a
*ghost* when it goes with its full KV: a digest of its prefix. A state stored again at a
ghost's prefix *returns*: it is never on probation and a deeper state does not cover it,
for its life; its credit is unchanged. As ARC bounds its ghost lists by the cache size, at
most as many ghosts are kept as live states, the oldest dropped first.

Worked example: a system prompt's state at 512 tokens, resumed from by several sessions,
goes with its full KV; a new session stores it again together with its own prompt end at
784 (which covers it). Without the ghost it is on probation and the least credited state
there (512 tokens' worth); with it, it stays off probation and a one-off prompt's state goes.
"""

from __future__ import annotations

import hashlib
from collections import Counter, OrderedDict

from uniradix.tree.core import TreeCore
from uniradix.tree.node import TreeNode


def prefix_digest(tree: TreeCore, node: TreeNode) -> bytes:
    """An id of the prefix ending at `node` that outlives the node: its namespace and its
    keys from the root, hashed."""
    h = hashlib.blake2b(digest_size=16)
    h.update((node.extra_key or "").encode())
    for n in reversed(list(tree.path_to_root(node))):
        h.update(n.key)
    return h.digest()


class StateGhosts:
    """The ghost list of one Mamba order and the live states that returned from it. Ghosts
    are listed with their prefix lengths, so that a store at a length no ghost has costs no
    digest."""

    def __init__(self, tree: TreeCore) -> None:
        self.tree = tree
        self._ghosts: OrderedDict[bytes, int] = OrderedDict()  # digest -> prefix length
        self._lengths: Counter[int] = Counter()
        self.returned: set[TreeNode] = set()

    def __len__(self) -> int:
        return len(self._ghosts)

    def on_store(self, node: TreeNode) -> bool:
        """`node` was just given a state: whether it returns from a ghost (then listed)."""
        if not self._ghosts or self.tree.prefix_len(node) not in self._lengths:
            return False
        digest = prefix_digest(self.tree, node)
        if digest not in self._ghosts:
            return False
        self._drop(digest)
        self.returned.add(node)
        return True

    def on_evict(self, node: TreeNode, showed_reuse: bool, live_states: int) -> None:
        """`node`'s state goes; it leaves a ghost if it showed reuse (or had returned) and its
        node leaves the tree with its full KV (it is an evictable leaf)."""
        if (showed_reuse or node in self.returned) and node in self.tree.leaves:
            digest = prefix_digest(self.tree, node)
            if digest not in self._ghosts:
                self._ghosts[digest] = self.tree.prefix_len(node)
                self._lengths[self._ghosts[digest]] += 1
            while len(self._ghosts) > max(live_states, 1):
                self._drop(next(iter(self._ghosts)))
        self.returned.discard(node)

    def _drop(self, digest: bytes) -> None:
        length = self._ghosts.pop(digest)
        self._lengths[length] -= 1
        if not self._lengths[length]:
            del self._lengths[length]

    def clear(self) -> None:
        self._ghosts.clear()
        self._lengths.clear()
        self.returned.clear()
