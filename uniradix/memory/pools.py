"""CachePools: the pools one cache owns, and how each kind of `FreeSlots` reaches them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.req_pool import ReqToTokenPool
from uniradix.types import FreeKind, Slots


@dataclass
class CachePools:
    req_to_token_pool: ReqToTokenPool
    kv_allocator: TokenSlotAllocator
    kv_pool: KVPool | None = None

    def free_functions(self) -> dict[FreeKind, Callable[[Slots], None]]:
        free = self.kv_allocator.free
        return {FreeKind.KV: free, FreeKind.KV_FULL_ONLY: free}

    def capacities(self) -> dict[str, int]:
        return {"full": self.kv_allocator.capacity}

    def available(self) -> dict[str, int]:
        return {"full": self.kv_allocator.available_size()}

    def reset(self) -> None:
        self.kv_allocator.reset()
        self.req_to_token_pool.reset()
