"""CachePools: the pools one cache owns, and how each kind of `FreeSlots` reaches them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.mamba_pool import MambaReqPool
from uniradix.memory.req_pool import ReqToTokenPool
from uniradix.types import FreeKind, Slots


@dataclass
class CachePools:
    req_to_token_pool: ReqToTokenPool
    kv_allocator: TokenSlotAllocator
    kv_pool: KVPool | None = None
    mamba: MambaReqPool | None = None

    def free_functions(self) -> dict[FreeKind, Callable[[Slots], None]]:
        free = self.kv_allocator.free
        functions: dict[FreeKind, Callable[[Slots], None]] = {
            FreeKind.KV: free,
            FreeKind.KV_FULL_ONLY: free,
        }
        if self.mamba is not None:
            functions[FreeKind.MAMBA] = self.mamba.allocator.free
        return functions

    def capacities(self) -> dict[str, int]:
        """Units per pool: "full" KV slots, "req" rows, "mamba" state slots."""
        sizes = {"full": self.kv_allocator.capacity, "req": self.req_to_token_pool.size}
        if self.mamba is not None:
            sizes["mamba"] = self.mamba.allocator.capacity
        return sizes

    def available(self) -> dict[str, int]:
        free = {
            "full": self.kv_allocator.available_size(),
            "req": self.req_to_token_pool.available_size(),
        }
        if self.mamba is not None:
            free["mamba"] = self.mamba.allocator.available_size()
        return free

    def reset(self) -> None:
        self.kv_allocator.reset()
        self.req_to_token_pool.reset()
        if self.mamba is not None:
            self.mamba.reset()
