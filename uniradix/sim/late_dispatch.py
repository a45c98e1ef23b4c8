"""Late binding: the router keeps the queue and hands a request on only when an instance can
admit it, so it decides from the index as it is at admission (llm-d's and Dynamo's
dispatchers queue at the router likewise).

An instance is free when it has a free running slot and nothing waiting in its own queue
(every request it was given is running). When one is, the first `LOOKAHEAD` waiting
requests are scored in arrival order (`CacheAware.pick`, nothing remembered) with the
instances' loads, and the first whose best instance admits it now goes there: free, and
passing the dry admission check (`admission_check.admits_now`: no chunked prefill to go on
with, and the memory of every component, given the hit the router predicts there). So a
request is never left in an instance's queue while that instance's own allocations evict
the windows and states it was routed for: what the index showed at routing is what the
instance matches. A conversation's next turn waits for the instance holding its context
rather than recomputing it on whichever instance freed first. A prompt no instance holds
goes at once, to the least loaded instance that admits it. When none of them picks an
instance that admits it, the oldest request goes to an idle instance (nothing running)
that admits it: no instance idles while requests wait, and one still running requests
waits for a request that picks it rather than take one whose context is elsewhere. If none
does, nothing is routed until a step frees memory or a slot. Routers without `pick` hand
the oldest request to any free instance that admits it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from uniradix.sim.router import CacheAware

LOOKAHEAD = 64  # waiting requests scored per free slot
FULL = 1 << 30  # the load shown to the router for an instance that cannot admit now

# (instance, cluster rid, predicted hit tokens) -> whether that instance admits it now
Admits = Callable[[int, int, int], bool]


def masked_loads(loads: Sequence[int], admits: Sequence[bool]) -> list[int]:
    """`loads` with each instance that cannot admit shown as unbounded, so a load-aware
    router picks one that can."""
    return [load if ok else FULL for load, ok in zip(loads, admits, strict=True)]


def next_late(
    ready: list[int],
    free: Sequence[bool],
    loads: Sequence[int],
    router: object,
    hashes_of: Callable[[int], list[int]],
    admits: Admits,
    idle: Sequence[bool],
) -> tuple[int, list[int]] | None:
    """The request to route now, taken off the heap `ready` (cluster rids, arrival order),
    with the loads the router should see (real ones when its pick admits it, else
    `masked_loads` for the instances that do); None when no free instance admits the
    requests considered."""
    page = router.index.block_size if isinstance(router, CacheAware) else 0
    if isinstance(router, CacheAware):
        for rid in heapq.nsmallest(LOOKAHEAD, ready):
            choice = router.pick(hashes_of(rid), loads)
            if choice < 0:
                able = [ok and admits(i, rid, 0) for i, ok in enumerate(free)]
                if any(able):
                    _take(ready, rid)
                    return rid, masked_loads(loads, able)
            elif free[choice] and admits(choice, rid, router.expected_pages[choice] * page):
                _take(ready, rid)
                return rid, list(loads)
    oldest, expected = ready[0], [0] * len(free)
    if isinstance(router, CacheAware):
        router.pick(hashes_of(oldest), loads)  # what it predicts on each instance
        expected = router.expected_pages
    else:
        idle = [True] * len(free)  # no pick to wait for
    able = [ok and idle[i] and admits(i, oldest, expected[i] * page) for i, ok in enumerate(free)]
    if not any(able):
        return None
    heapq.heappop(ready)
    return oldest, masked_loads(loads, able)


def _take(ready: list[int], rid: int) -> None:
    ready.remove(rid)
    heapq.heapify(ready)
