"""Routers: which instance of a cluster gets a request. `round-robin` and `least-loaded`
ignore what the instances cache; `cache-aware` asks a `KVEventIndex` (fed only by the
instances' KV events, as a real router is) how much of the prompt each one holds.

Load is the number of requests an instance has outstanding (queued or running).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from uniradix.events.index import KVEventIndex

ROUTERS = ("round-robin", "least-loaded", "cache-aware")


class Router(Protocol):
    def choose(self, tokens: np.ndarray, loads: Sequence[int]) -> int:
        """The instance for a prompt of `tokens`, given each instance's load."""
        ...


class RoundRobin:
    def __init__(self) -> None:
        self._next = 0

    def choose(self, tokens: np.ndarray, loads: Sequence[int]) -> int:
        i = self._next % len(loads)
        self._next += 1
        return i


class LeastLoaded:
    """The least loaded instance; ties go round-robin, so an idle cluster spreads evenly."""

    def __init__(self) -> None:
        self._turn = 0

    def choose(self, tokens: np.ndarray, loads: Sequence[int]) -> int:
        n = len(loads)
        low = min(loads)
        self._turn += 1
        return next(i for k in range(n) if loads[i := (self._turn + k) % n] == low)


class CacheAware:
    """The instance holding the longest prefix of the prompt among those whose load is
    within `slack` requests of the least loaded (so a popular prefix cannot pile every
    request on one instance); ties, and prompts no instance holds, go to the least loaded.

    `names` are the index's instance names, in the cluster's order.
    """

    def __init__(self, index: KVEventIndex, names: Sequence[str], slack: int = 4) -> None:
        if slack < 0:
            raise ValueError(f"slack must be >= 0, got {slack}")
        self.index = index
        self.names = list(names)
        self.slack = slack
        self._fallback = LeastLoaded()

    def choose(self, tokens: np.ndarray, loads: Sequence[int]) -> int:
        prefix = self.index.prefix_lengths(tokens)
        held = [prefix.get(name, 0) for name in self.names]
        limit = min(loads) + self.slack
        best = max((held[i], -loads[i]) for i in range(len(loads)) if loads[i] <= limit)
        if best[0] == 0:
            return self._fallback.choose(tokens, loads)
        return next(i for i in range(len(loads)) if (held[i], -loads[i]) == best)


def make_router(name: str, index: KVEventIndex, names: Sequence[str]) -> Router:
    if name == "round-robin":
        return RoundRobin()
    if name == "least-loaded":
        return LeastLoaded()
    if name == "cache-aware":
        return CacheAware(index, names)
    raise ValueError(f"unknown router {name!r}; choose from {ROUTERS}")
