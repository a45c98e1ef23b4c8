"""CachePools: the pools one cache owns, and how each kind of `FreeSlots` reaches them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.req_pool import ReqToTokenPool
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.types import FreeKind


@dataclass
class CachePools:
    """`kv_allocator` hands out full-KV slots; an `SWASlotAllocator` pairs each with a slot
    of the SWA pool (`swa_kv_pool` holds those layers' tensors)."""

    req_to_token_pool: ReqToTokenPool
    kv_allocator: TokenSlotAllocator | SWASlotAllocator
    kv_pool: KVPool | None = None
    swa_kv_pool: KVPool | None = None

    def free_functions(self) -> dict[FreeKind, Callable[[torch.Tensor], None]]:
        a = self.kv_allocator
        if isinstance(a, SWASlotAllocator):
            return {
                FreeKind.KV: a.free,
                FreeKind.KV_FULL_ONLY: a.free_full_only,
                FreeKind.SWA: a.free_swa,
                FreeKind.SWA_MOVE: a.move_swa,
            }
        return {FreeKind.KV: a.free, FreeKind.KV_FULL_ONLY: a.free}

    def capacities(self) -> dict[str, int]:
        a = self.kv_allocator
        if isinstance(a, SWASlotAllocator):
            return {"full": a.capacity, "swa": a.swa_capacity}
        return {"full": a.capacity}

    def available(self) -> dict[str, int]:
        a = self.kv_allocator
        if isinstance(a, SWASlotAllocator):
            return {"full": a.full_available_size(), "swa": a.swa_available_size()}
        return {"full": a.available_size()}

    def reset(self) -> None:
        self.kv_allocator.reset()
        self.req_to_token_pool.reset()
