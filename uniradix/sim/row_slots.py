"""The running requests' KV slots: whole pages written into a request's row, evicting first
when a pool is short, and what the running requests will still allocate."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.sim.batch import RunningRequest, SchedulerListener
from uniradix.types import EvictParams

if TYPE_CHECKING:
    from uniradix.cache.controller import UnifiedRadixCache


class RowSlots:
    def __init__(
        self, cache: UnifiedRadixCache, listener: SchedulerListener, decode_reserve_ratio: float
    ) -> None:
        self.cache = cache
        self.listener = listener
        self.page_size = cache.page_size
        self.decode_reserve_ratio = decode_reserve_ratio

    def page_ceil(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size) * self.page_size

    def alloc(self, request: RunningRequest, end: int) -> bool:
        """Allocates whole pages so row positions `[0, end)` have slots; False when short
        even after evicting."""
        req = request.req
        need = self.page_ceil(end) - req.kv_allocated_len
        if need <= 0:
            return True
        self.make_room(need)
        kv = self.cache.pools.kv_allocator
        # Host slots where the allocator makes them (a plain one): the row is written through
        # its host view, so no tensor is made and read back (per request per page of decode).
        slots = kv.alloc_host(need) if type(kv) is TokenSlotAllocator else kv.alloc(need)
        if slots is None:
            return False
        assert req.req_pool_idx is not None
        self.cache.pools.req_to_token_pool.write(req.req_pool_idx, req.kv_allocated_len, slots)
        req.kv_allocated_len += need
        return True

    def make_room(self, num_tokens: int) -> None:
        """Evicts so `num_tokens` slots are free in every KV pool (full, and SWA if any)."""
        # The two KV pools' free slots read directly: `pools.available()` builds a dict of
        # every pool, and this runs per request per step.
        kv = self.cache.pools.kv_allocator
        if isinstance(kv, SWASlotAllocator):
            full_short = num_tokens - kv.full_available_size()
            swa_short = num_tokens - kv.swa_available_size()
        else:
            full_short, swa_short = num_tokens - kv.available_size(), 0
        if full_short > 0 or swa_short > 0:
            params = EvictParams(num_tokens=max(0, full_short), swa_num_tokens=max(0, swa_short))
            self.listener.on_evict(self.cache.evict(params))

    def reserved(self, running: Sequence[RunningRequest]) -> int:
        """Memory the running requests will still allocate (decode part scaled)."""
        total, ps, ratio = 0, self.page_size, self.decode_reserve_ratio
        for r in running:  # per admission tried, over every running request: kept inline
            prompt_left = -(-r.prompt_len // ps) * ps - r.req.kv_allocated_len
            if prompt_left > 0:
                total += prompt_left
            total += math.ceil(ratio * (r.spec.output_len - r.num_output))
        return total

    def spare(
        self, running: Sequence[RunningRequest], prompt_len: int, hit: int, outputs_left: int
    ) -> int:
        """Full-KV slots left (negative: short) once a request of `prompt_len` tokens with
        `hit` cached and `outputs_left` to decode is counted beside `running`: free and
        evictable, less what every one of them will still allocate (decode part scaled)."""
        kv = self.cache.pools.kv_allocator
        free = kv.full_available_size() if isinstance(kv, SWASlotAllocator) else kv.available_size()
        room = free + self.cache.evictable_size() - self.reserved(running)
        need = self.page_ceil(prompt_len) - hit
        return room - need - math.ceil(self.decode_reserve_ratio * outputs_left)

    def decode_fits(self, decoding: Sequence[RunningRequest]) -> bool:
        """Whether one more token for each of `decoding` fits, evicting if needed."""
        need = self.page_size * sum(
            1 for r in decoding if len(r.req.token_ids) - 1 >= r.req.kv_allocated_len
        )
        self.make_room(need)
        return need <= self.cache.pools.kv_allocator.available_size()
