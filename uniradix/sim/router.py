"""Routers: which instance of a cluster gets a request. `round-robin` and `least-loaded`
ignore what the instances cache; `cache-aware` asks a `KVEventIndex` (fed only by the
instances' KV events, as a real router is) how much of the prompt each one holds.

Load is the number of requests an instance has outstanding (queued or running).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from uniradix.event_sink import MEDIUM_CPU_PINNED, MEDIUM_DISK, MEDIUM_GPU
from uniradix.events.index import KVEventIndex

ROUTERS = ("round-robin", "least-loaded", "cache-aware")
REPLICATED = ("attract", "discount")  # `CacheAware(replicated=)`


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
        self._turn += 1
        return self._least(loads, self._turn)

    def peek(self, loads: Sequence[int]) -> int:
        """What the next `choose` would answer, without taking a turn."""
        return self._least(loads, self._turn + 1)

    @staticmethod
    def _least(loads: Sequence[int], turn: int) -> int:
        n = len(loads)
        low = min(loads)
        return next(i for k in range(n) if loads[i := (turn + k) % n] == low)


class CacheAware:
    """The instance holding the longest prefix of the prompt among those whose load is
    within `slack` requests of the least loaded (so a popular prefix cannot pile every
    request on one instance); ties, and prompts no instance holds, go to the least loaded.

    What an instance holds is what it can resume from, as its events said (a hybrid
    instance's SWA / Mamba groups included: `KVEventIndex.weighted_prefix`), plus the pages
    of the last `recent` prompts routed to it: those are being prefilled and will be cached
    before the events say so (SGLang's router likewise inserts a routed prompt into its own
    tree at once).
    Its prediction (`expected_pages`) is stricter on an instance publishing SWA / Mamba
    groups: a prompt in flight leaves a window and a state at its own end only (the
    placement rule), so it adds the pages up to that end when the new prompt holds them all,
    and nothing at the boundaries it merely passes; and only until that prompt's first
    token is back (`prefilled`, told by a dispatcher that sees responses): from then on the
    events say whether its window and state still live.
    `names` are the index's instance names, in the cluster's order. A page held only on an
    instance's host tier (`CPU_PINNED`) counts `host_weight` of a device page: it is a hit
    after a load-back (0.8 is llm-d's default `cpu` tier weight); one the pages in L3
    (`DISK`) add counts `storage_weight`, below the host's (a prefetch, then a load-back).

    `replicated="discount"` scores only the pages an instance holds past the prefix a
    second instance holds too: a replicated system prompt then gives no preference, and a
    new conversation on it goes to the least loaded, while a context held on one instance
    still attracts (the default, "attract", scores every page held).
    `continuation_slack` (default: `slack`) is the load slack for a conversation's next
    turn: a prompt that holds the whole of a prompt recently routed to an instance, on
    pages no other instance holds that deep, may go there while that instance's load is
    within this many requests of the least loaded (moving a turn recomputes its context).
    """

    def __init__(
        self,
        index: KVEventIndex,
        names: Sequence[str],
        slack: int = 16,
        recent: int = 128,
        host_weight: float = 0.8,
        storage_weight: float = 0.5,
        replicated: str = "attract",
        continuation_slack: int | None = None,
    ) -> None:
        if slack < 0 or recent < 0 or not 0 <= storage_weight <= host_weight <= 1:
            raise ValueError(
                f"slack={slack} and recent={recent} must be >= 0, "
                f"0 <= storage_weight={storage_weight} <= host_weight={host_weight} <= 1"
            )
        if continuation_slack is not None and continuation_slack < 0:
            raise ValueError(f"continuation_slack={continuation_slack} must be >= 0")
        if replicated not in REPLICATED:
            raise ValueError(f"replicated={replicated!r}; choose from {REPLICATED}")
        self.weights = {
            MEDIUM_GPU: 1.0,
            MEDIUM_CPU_PINNED: host_weight,
            MEDIUM_DISK: storage_weight,
        }
        self.index = index
        self.names = list(names)
        self.slack = slack
        self.recent = recent
        self.replicated = replicated
        self.continuation_slack = slack if continuation_slack is None else continuation_slack
        self._routed: deque[tuple[int, list[int]]] = deque()
        self._in_flight: list[Counter[int]] = [Counter() for _ in self.names]
        self._ends: list[Counter[int]] = [Counter() for _ in self.names]  # last page hashes
        # Of those, the prompts whose first token is not back yet (`prefilled`)
        self._unpublished: list[set[int]] = [set() for _ in self.names]
        self._fallback = LeastLoaded()
        self.expected_pages = [0] * len(self.names)  # per instance, at the last `choose`

    def choose(self, tokens: np.ndarray, loads: Sequence[int]) -> int:
        hashes = self.index.page_hashes(tokens)
        choice = self.pick(hashes, loads)
        if choice < 0:
            choice = self._fallback.choose(tokens, loads)
        self._remember(choice, hashes)
        return choice

    def pick(self, hashes: list[int], loads: Sequence[int]) -> int:
        """The instance `choose` would answer for a prompt of page `hashes`, remembering
        nothing (a late-binding dispatcher asks before it routes); -1 when no instance holds
        any of it (`choose` then takes the least loaded)."""
        prefix = self.index.weighted_prefix(hashes, self.weights)
        held, ends = [], []
        for i, name in enumerate(self.names):
            score, n = prefix.get(name, (0.0, 0))
            in_flight, end = self._in_flight[i], n
            while end < len(hashes) and hashes[end] in in_flight:
                end += 1
            held.append(score + (end - n))
            ends.append(end)
            self.expected_pages[i] = self._expected(i, hashes, n, end)
        shared = sorted(ends)[-2] if len(ends) > 1 else 0  # pages a second instance holds
        if self.replicated == "discount":
            held = [
                h * max(0, e - shared) / e if e else 0.0 for h, e in zip(held, ends, strict=True)
            ]
        slack = [self.slack] * len(ends)
        if self.continuation_slack != self.slack:
            for i, e in enumerate(ends):
                if e > shared and self._continues(i, hashes, e):
                    slack[i] = self.continuation_slack
        limits = [min(loads) + s for s in slack]
        best = max((held[i], -loads[i]) for i in range(len(loads)) if loads[i] <= limits[i])
        if best[0] == 0:
            return -1
        return next(i for i in range(len(loads)) if (held[i], -loads[i]) == best)

    def _expected(self, instance: int, hashes: list[int], indexed: int, in_flight: int) -> int:
        """Pages the instance should resume from: `indexed` (its events) extended to
        `in_flight` (pages of prompts in flight there) on a full-attention instance; on a
        hybrid one only to the deepest end of a prompt in flight that `hashes` holds whole
        (the chained hash of its last page is equal)."""
        name = self.names[instance]
        if not self.index.has_groups(name):
            return in_flight
        unpublished = self._unpublished[instance]
        return next(
            (k for k in range(in_flight, indexed, -1) if hashes[k - 1] in unpublished), indexed
        )

    def prefilled(self, instance: int, end: int) -> None:
        """The prompt routed to `instance` whose last page hash is `end` has its first token
        back (its prefill is done and published): from now on the events say whether a
        window and a state live at its end, so the prediction stops counting it in flight."""
        self._unpublished[instance].discard(end)

    def _continues(self, instance: int, hashes: list[int], held: int) -> bool:
        """Whether one of the first `held` pages of `hashes` is the last page of a prompt
        recently routed to `instance`, so that the prompt holds all of it: a conversation's
        next turn."""
        ends = self._ends[instance]
        return any(h in ends for h in hashes[:held])

    def _remember(self, instance: int, hashes: list[int]) -> None:
        if not self.recent:
            return
        self._routed.append((instance, hashes))
        self._in_flight[instance].update(hashes)
        self._ends[instance].update(hashes[-1:])
        self._unpublished[instance].update(hashes[-1:])
        if len(self._routed) > self.recent:
            old, old_hashes = self._routed.popleft()
            _forget(self._in_flight[old], old_hashes)
            _forget(self._ends[old], old_hashes[-1:])
            if old_hashes and old_hashes[-1] not in self._ends[old]:
                self._unpublished[old].discard(old_hashes[-1])


def _forget(counts: Counter[int], hashes: list[int]) -> None:
    counts.subtract(hashes)
    for h in hashes:
        if counts[h] <= 0:
            del counts[h]


# (index, instance names, recent) -> a router: what a cluster builds its router with.
RouterFactory = Callable[[KVEventIndex, Sequence[str], int], Router]


def make_router(
    name: str, index: KVEventIndex, names: Sequence[str], recent: int = 128, **options: Any
) -> Router:
    """`recent`: prompts a cache-aware router remembers as in flight (the cluster's window
    of outstanding requests); `options`: `CacheAware`'s."""
    if name == "round-robin":
        return RoundRobin()
    if name == "least-loaded":
        return LeastLoaded()
    if name == "cache-aware":
        return CacheAware(index, names, recent=recent, **options)
    raise ValueError(f"unknown router {name!r}; choose from {ROUTERS}")
