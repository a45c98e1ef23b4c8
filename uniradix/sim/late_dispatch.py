"""Late binding: the router keeps the queue and hands a request on only when an instance can
admit it, so it decides from the index as it is at admission (llm-d's and Dynamo's
dispatchers queue at the router likewise).

An instance can admit when it has a free running slot and nothing waiting in its own queue
(every request it was given is running: memory let the last one in). When one can, the
first `LOOKAHEAD` waiting requests are scored in arrival order (`CacheAware.pick`, nothing
remembered) with the instances' loads, and the first whose best instance can admit goes
there: a conversation's next turn waits for the instance holding its context rather than
recomputing it on whichever instance freed first. A prompt no instance holds goes at once,
to the least loaded instance that can admit. When none of them picks an instance that can
admit, the oldest request goes to one (work-conserving: no instance idles while requests
wait). Routers without `pick` hand the oldest request to an instance that can admit.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from uniradix.sim.router import CacheAware

LOOKAHEAD = 64  # waiting requests scored per free slot
FULL = 1 << 30  # the load shown to the router for an instance that cannot admit now


def masked_loads(loads: Sequence[int], free: Sequence[bool]) -> list[int]:
    """`loads` with each instance that cannot admit shown as unbounded, so a load-aware
    router picks one that can."""
    return [load if ok else FULL for load, ok in zip(loads, free, strict=True)]


def next_late(
    ready: list[int],
    free: Sequence[bool],
    loads: Sequence[int],
    router: object,
    hashes_of: Callable[[int], list[int]],
) -> tuple[int, bool]:
    """The request to route now, taken off the heap `ready` (cluster rids, arrival order),
    and whether the router should see its real loads (True: its pick can admit) or the
    masked ones (`masked_loads`)."""
    if isinstance(router, CacheAware):
        for rid in heapq.nsmallest(LOOKAHEAD, ready):
            choice = router.pick(hashes_of(rid), loads)
            if choice < 0 or free[choice]:
                _take(ready, rid)
                return rid, choice >= 0
    return heapq.heappop(ready), False


def _take(ready: list[int], rid: int) -> None:
    ready.remove(rid)
    heapq.heapify(ready)
