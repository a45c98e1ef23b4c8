"""PoolRequestState: a running request's `RequestState` over the cache's pools.

Where each model layer keeps its state (`row = req.req_pool_idx`, `layout` maps a model layer
id to the pool-local layer number)::

    full layer   kv_pool layer      at slots  req_to_token[row, positions]
    SWA layer    swa_kv_pool layer  at slots  kv_allocator.translate(those full slots)
    Mamba layer  mamba state layer  at slot   req.mamba_pool_idx

The store only moves tensors: the scheduler allocates the slots, the cache copies a matched
Mamba state into the request's slot (copy-on-write) and frees what left the window. So this
store is where a wrong index would surface: a position whose slot or SWA peer lies on the
padding page (a freed peer translates to 0) raises `InvariantError` instead of reading
garbage.
"""

from __future__ import annotations

import torch

from uniradix.engine.model import ModelConfig
from uniradix.errors import InvariantError
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.mamba_pool import MambaStatePool
from uniradix.memory.pools import CachePools
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.types import Req

KV = tuple[torch.Tensor, torch.Tensor]


class PoolLayout:
    """The pools one model's layers live in, checked against the model's shapes."""

    def __init__(self, config: ModelConfig, pools: CachePools) -> None:
        self.pools = pools
        self.page_size = pools.kv_allocator.page_size
        self.full_layer = {g: i for i, g in enumerate(config.full_layer_ids)}
        self.swa_layer = {g: i for i, g in enumerate(config.swa_layer_ids)}
        self.mamba_layer = {g: i for i, g in enumerate(config.mamba_layer_ids)}
        kv_shape = (config.num_kv_heads, config.head_dim)
        self.kv_pool = _checked_kv_pool(pools.kv_pool, len(self.full_layer), kv_shape, config)
        self.swa_kv_pool: KVPool | None = None
        self.swa_allocator: SWASlotAllocator | None = None
        if self.swa_layer:
            if not isinstance(pools.kv_allocator, SWASlotAllocator):
                raise ValueError("the model has SWA layers but the cache has no SWA pool")
            self.swa_allocator = pools.kv_allocator
            self.swa_kv_pool = _checked_kv_pool(
                pools.swa_kv_pool, len(self.swa_layer), kv_shape, config
            )
        self.mamba_states: MambaStatePool | None = None
        if self.mamba_layer:
            if pools.mamba is None:
                raise ValueError("the model has Mamba layers but the cache has no Mamba pool")
            states = pools.mamba.states
            got = (
                states.num_layers,
                tuple(states.conv_states.shape[2:]),
                tuple(states.temporal_states.shape[2:]),
                states.conv_states.dtype,
            )
            want = (
                len(self.mamba_layer),
                config.conv_state_shape,
                config.ssm_state_shape,
                config.dtype,
            )
            if got != want:
                raise ValueError(f"Mamba state pool (layers, conv, ssm, dtype) {got} != {want}")
            self.mamba_states = states

    def state(self, req: Req) -> PoolRequestState:
        return PoolRequestState(self, req)


def _checked_kv_pool(
    pool: KVPool | None, num_layers: int, kv_shape: tuple[int, int], config: ModelConfig
) -> KVPool | None:
    if num_layers == 0:
        return pool
    if pool is None or pool.num_layers != num_layers:
        raise ValueError(
            f"the model has {num_layers} layers of a kind whose KV pool has "
            f"{0 if pool is None else pool.num_layers}"
        )
    buffer = pool.k_buffers[0]
    if tuple(buffer.shape[1:]) != kv_shape or buffer.dtype != config.dtype:
        raise ValueError(
            f"KV pool rows are {tuple(buffer.shape[1:])} {buffer.dtype}, the model writes "
            f"{kv_shape} {config.dtype}"
        )
    return pool


class PoolRequestState:
    """One admitted request's K/V and Mamba states in the pools (see `RequestState`)."""

    def __init__(self, layout: PoolLayout, req: Req) -> None:
        if req.req_pool_idx is None:
            raise ValueError("request has no req_pool_idx: admit it before running it")
        self.layout = layout
        self.req = req
        self.row = req.req_pool_idx

    def _full_slots(self, positions: torch.Tensor | slice) -> torch.Tensor:
        slots = self.layout.pools.req_to_token_pool.req_to_token[self.row, positions]
        return self._checked(slots, "full")

    def _swa_slots(self, full_slots: torch.Tensor) -> torch.Tensor:
        assert self.layout.swa_allocator is not None
        peers = self.layout.swa_allocator.translate(full_slots)
        return self._checked(torch.from_numpy(peers).to(full_slots.device), "SWA")

    def _checked(self, slots: torch.Tensor, kind: str) -> torch.Tensor:
        bad = slots < self.layout.page_size
        if bool(bad.any()):
            raise InvariantError(
                f"request row {self.row}: {kind} slots {slots[bad][:8].tolist()} lie on the "
                "padding page (unallocated, or a freed SWA peer)"
            )
        return slots

    def write_full_kv(
        self, layer_id: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        assert self.layout.kv_pool is not None
        self.layout.kv_pool.set_kv(
            self.layout.full_layer[layer_id], self._full_slots(positions), k, v
        )

    def read_full_kv(self, layer_id: int, end_pos: int) -> KV:
        assert self.layout.kv_pool is not None
        slots = self._full_slots(slice(0, end_pos))
        return self.layout.kv_pool.get_kv(self.layout.full_layer[layer_id], slots)

    def write_swa_kv(
        self, layer_id: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        assert self.layout.swa_kv_pool is not None
        slots = self._swa_slots(self._full_slots(positions))
        self.layout.swa_kv_pool.set_kv(self.layout.swa_layer[layer_id], slots, k, v)

    def read_swa_kv(self, layer_id: int, start_pos: int, end_pos: int) -> KV:
        assert self.layout.swa_kv_pool is not None
        slots = self._swa_slots(self._full_slots(slice(start_pos, end_pos)))
        return self.layout.swa_kv_pool.get_kv(self.layout.swa_layer[layer_id], slots)

    def _mamba_slot(self) -> int:
        if self.req.mamba_pool_idx is None:
            raise ValueError("request has no Mamba slot: match it with req= at admission")
        return self.req.mamba_pool_idx

    def read_mamba_state(self, layer_id: int) -> KV:
        states = self.layout.mamba_states
        assert states is not None
        i, slot = self.layout.mamba_layer[layer_id], self._mamba_slot()
        return states.conv_states[i, slot], states.temporal_states[i, slot]

    def write_mamba_state(
        self, layer_id: int, conv_state: torch.Tensor, ssm_state: torch.Tensor
    ) -> None:
        states = self.layout.mamba_states
        assert states is not None
        i, slot = self.layout.mamba_layer[layer_id], self._mamba_slot()
        states.conv_states[i, slot] = conv_state
        states.temporal_states[i, slot] = ssm_state
