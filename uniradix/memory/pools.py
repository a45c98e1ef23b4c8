"""CachePools: the pools one cache owns, and how each kind of `FreeSlots` reaches them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.mamba_pool import MambaReqPool
from uniradix.memory.req_pool import ReqToTokenPool
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.types import FreeKind, Slots


class ExtraPool(Protocol):
    """The pool of a component from outside the package (a `TokenSlotAllocator` is one):
    what the cache needs to free its slots and to check its accounting."""

    @property
    def capacity(self) -> int: ...

    def available_size(self) -> int: ...

    def free(self, indices: Slots, node_value: bool = False) -> None: ...

    def is_allocated(self, indices: Slots) -> npt.NDArray[np.bool_]: ...

    def reset(self) -> None: ...


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
    # pools of components from outside, by component name; `FreeSlots(kind=name)` frees there
    extra: dict[str, ExtraPool] = field(default_factory=dict)

    def free_functions(self) -> dict[FreeKind | str, Callable[[Slots, bool], None]]:
        a = self.kv_allocator
        functions: dict[FreeKind | str, Callable[[Slots, bool], None]]
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
        for name, pool in self.extra.items():
            functions[name] = pool.free
        return functions

    def capacities(self) -> dict[str, int]:
        """Units per pool: "full" and "swa" KV slots, "req" rows, "mamba" state slots."""
        a = self.kv_allocator
        sizes = {"full": a.capacity, "req": self.req_to_token_pool.size}
        if isinstance(a, SWASlotAllocator):
            sizes["swa"] = a.swa_capacity
        return sizes | {name: pool.capacity for name, pool in self._slot_pools().items()}

    def available(self) -> dict[str, int]:
        return {name: read() for name, read in self.free_readers().items()}

    def free_readers(self) -> dict[str, Callable[[], int]]:
        """Per pool, the bound method giving its free units now (what `available` reads):
        fixed for the pools' lifetime, so a per-step reader builds it once."""
        a = self.kv_allocator
        readers: dict[str, Callable[[], int]] = {"req": self.req_to_token_pool.available_size}
        if isinstance(a, SWASlotAllocator):
            readers |= {"full": a.full_available_size, "swa": a.swa_available_size}
        else:
            readers["full"] = a.available_size
        return readers | {name: pool.available_size for name, pool in self._slot_pools().items()}

    def _slot_pools(self) -> dict[str, ExtraPool]:
        """The pools besides KV slots and request rows, counted alike by name: the Mamba
        state slots, then the extra pools."""
        pools: dict[str, ExtraPool] = {}
        if self.mamba is not None:
            pools["mamba"] = self.mamba.allocator
        return pools | self.extra

    def reset(self) -> None:
        self.kv_allocator.reset()
        self.req_to_token_pool.reset()
        if self.mamba is not None:
            self.mamba.reset()
        for pool in self.extra.values():
            pool.reset()
