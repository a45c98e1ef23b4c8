"""Eviction policies: the order in which evictable leaves of the base component go.

A policy maps a node to a sortable key; the smallest key is evicted first. Access times come
from the tree's monotonic counter (never wall clock), so orders are reproducible.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from uniradix.tree.node import TreeNode

PolicyKey = Callable[[TreeNode], Any]


def _lru(node: TreeNode) -> Any:
    return node.last_access_time


def _lfu(node: TreeNode) -> Any:
    return (node.hit_count, node.last_access_time)


def _fifo(node: TreeNode) -> Any:
    return node.creation_time


def _mru(node: TreeNode) -> Any:
    return -node.last_access_time


def _priority(node: TreeNode) -> Any:
    return (node.priority, node.last_access_time)


# Segmented LRU: a node hit at least this often (it served a prefix twice) is in the protected
# segment; every probationary node goes before any protected one, each segment in LRU order.
# Two, as SGLang's `slru`: one hit is often the request's own follow-up turn, a second shows reuse.
SLRU_PROTECTED_HITS = 2


def _slru(node: TreeNode) -> Any:
    return (node.hit_count >= SLRU_PROTECTED_HITS, node.last_access_time)


EVICTION_POLICIES: dict[str, PolicyKey] = {
    "lru": _lru,
    "lfu": _lfu,
    "fifo": _fifo,
    "mru": _mru,
    "priority": _priority,
    "slru": _slru,
}


def eviction_policy(name: str) -> PolicyKey:
    try:
        return EVICTION_POLICIES[name]
    except KeyError:
        raise ValueError(
            f"unknown eviction policy {name!r}; choose one of {sorted(EVICTION_POLICIES)}"
        ) from None
