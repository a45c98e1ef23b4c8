"""A dry admission check: whether an instance's next step would admit a request with the
memory of every component, asked by a late-binding dispatcher before it routes there.

Routing to an instance that admits only later leaves the request waiting in its queue while
the instance's own allocations (a chunked prefill, other admissions, decode) evict the SWA
windows and Mamba states the router counted on; the hit then falls short of the prediction.
The check reads only the instance's memory and scheduler state (what a serving instance
reports as its KV usage and queue), never the cache's content: the hit it is given is the
router's prediction from the events.

Each condition mirrors a place where `Scheduler._admit` declines or defers a request:

- no chunked prefill in progress (the next step continues it and admits nothing before);
- a running slot and a request row;
- full KV: `RowSlots.spare` for the whole prompt, the predicted hit excepted, and the
  decode reserve;
- SWA: the first chunk's slots from free plus evictable SWA, less the predicted window
  (locked at admission, so not evictable for it);
- Mamba: a working slot, free or evictable.
"""

from __future__ import annotations

from uniradix.components.swa import SWAComponent
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.sim.scheduler import Scheduler
from uniradix.types import ComponentType


def admits_now(scheduler: Scheduler, prompt_len: int, hit: int, output_len: int) -> bool:
    """Whether `scheduler`'s next step would admit a fresh request of `prompt_len` tokens
    with `hit` of them cached (the router's prediction) and `output_len` to decode, all of
    its components' memory included."""
    cache, pools = scheduler.cache, scheduler.cache.pools
    if scheduler.chunked is not None or scheduler.queued:
        return False
    if len(scheduler.running) >= scheduler.config.max_running:
        return False
    if pools.req_to_token_pool.available_size() < 1:
        return False
    ps = scheduler.page_size
    hit = min(hit, (prompt_len - 1) // ps * ps)  # the last token is always computed
    if scheduler.slots.spare(scheduler.running, prompt_len, hit, output_len) < 0:
        return False
    kv = pools.kv_allocator
    if isinstance(kv, SWASlotAllocator):
        chunk = min(prompt_len - hit, scheduler.config.chunk_size)
        need = -(-(hit + chunk) // ps) * ps - hit
        swa = cache.component(ComponentType.SWA)
        window = min(hit, swa.window_tail if isinstance(swa, SWAComponent) else 0)
        room = kv.swa_available_size() + cache.evictable_size(ComponentType.SWA) - window
        if room < need:
            return False
    if pools.mamba is not None:
        room = pools.mamba.allocator.available_size() + cache.evictable_size(ComponentType.MAMBA)
        if room < 1:
            return False
    return True
