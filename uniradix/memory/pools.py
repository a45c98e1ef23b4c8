"""CachePools: the pools one cache owns, and how each kind of `FreeSlots` reaches them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.mamba_pool import MambaReqPool
from uniradix.memory.req_pool import ReqToTokenPool
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.types import FreeKind, Slots


@dataclass
class CachePools:
    """`kv_allocator` hands out full-KV slots; an `SWASlotAllocator` pairs each with a slot
    of the SWA pool (`swa_kv_pool` holds those layers' tensors). `mamba` holds the Mamba
    state slots and the request-side slot bookkeeping."""

    req_to_token_pool: ReqToTokenPool
    kv_allocator: TokenSlotAllocator | SWASlotAllocator
    kv_pool: KVPool | None = None
    mamba: MambaReqPool | None = None
    swa_kv_pool: KVPool | None = None

    def free_functions(self) -> dict[FreeKind, Callable[[Slots, bool], None]]:
        a = self.kv_allocator
        functions: dict[FreeKind, Callable[[Slots, bool], None]]
        if isinstance(a, SWASlotAllocator):
            functions = {
                FreeKind.KV: a.free,
                FreeKind.KV_FULL_ONLY: a.free_full_only,
                FreeKind.SWA: a.free_swa,
                FreeKind.SWA_MOVE: a.move_swa,
            }
        else:
            functions = {FreeKind.KV: a.free, FreeKind.KV_FULL_ONLY: a.free}
        if self.mamba is not None:
            functions[FreeKind.MAMBA] = self.mamba.allocator.free
        return functions

    def capacities(self) -> dict[str, int]:
        """Units per pool: "full" and "swa" KV slots, "req" rows, "mamba" state slots."""
        a = self.kv_allocator
        sizes = {"full": a.capacity, "req": self.req_to_token_pool.size}
        if isinstance(a, SWASlotAllocator):
            sizes["swa"] = a.swa_capacity
        if self.mamba is not None:
            sizes["mamba"] = self.mamba.allocator.capacity
        return sizes

    def available(self) -> dict[str, int]:
        a = self.kv_allocator
        free = {"req": self.req_to_token_pool.available_size()}
        if isinstance(a, SWASlotAllocator):
            free |= {"full": a.full_available_size(), "swa": a.swa_available_size()}
        else:
            free["full"] = a.available_size()
        if self.mamba is not None:
            free["mamba"] = self.mamba.allocator.available_size()
        return free

    def reset(self) -> None:
        self.kv_allocator.reset()
        self.req_to_token_pool.reset()
        if self.mamba is not None:
            self.mamba.reset()
