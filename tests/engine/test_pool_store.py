"""A sketch of the pool-backed RequestState the engine will use, checked against the dense
reference: full K/V in a KVPool at the request's req_to_token slots, SWA K/V in its own
KVPool through a full->SWA slot mapping, Mamba states in the request's Mamba slot. Slots
are scattered on purpose, so any position/slot mix-up changes the logits."""

from __future__ import annotations

import pytest
import torch

from uniradix.engine import DenseRequestState, ModelConfig, TinyHybridModel
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.req_pool import ReqToTokenPool

CONFIG = ModelConfig(
    hidden_size=32,
    layer_pattern="FSMSF",
    head_dim=8,
    intermediate_size=64,
    sliding_window=3,
    d_state=4,
    dtype=torch.float64,
)
NUM_SLOTS = 64


class PoolState:
    def __init__(self, row: int, req_pool: ReqToTokenPool, mamba_slot: int) -> None:
        self.row = row
        self.req_pool = req_pool
        self.mamba_slot = mamba_slot
        self.full_layer = {g: i for i, g in enumerate(CONFIG.full_layer_ids)}
        self.swa_layer = {g: i for i, g in enumerate(CONFIG.swa_layer_ids)}
        self.mamba_layer = {g: i for i, g in enumerate(CONFIG.mamba_layer_ids)}
        kv = {"num_kv_heads": CONFIG.num_kv_heads, "head_dim": CONFIG.head_dim}
        self.full_pool = KVPool(NUM_SLOTS, len(self.full_layer), dtype=CONFIG.dtype, **kv)
        self.swa_pool = KVPool(NUM_SLOTS, len(self.swa_layer), dtype=CONFIG.dtype, **kv)
        self.full_to_swa = torch.randperm(NUM_SLOTS, generator=torch.Generator().manual_seed(1))
        num_mamba, slots = len(self.mamba_layer), mamba_slot + 1
        self.conv = torch.full((num_mamba, slots, *CONFIG.conv_state_shape), float("nan"))
        self.ssm = torch.full((num_mamba, slots, *CONFIG.ssm_state_shape), float("nan"))

    def _slots(self, start_pos: int, end_pos: int) -> torch.Tensor:
        return self.req_pool.read(self.row, start_pos, end_pos)

    def write_full_kv(
        self, layer_id: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        slots = self.req_pool.req_to_token[self.row, positions]
        self.full_pool.set_kv(self.full_layer[layer_id], slots, k, v)

    def read_full_kv(self, layer_id: int, end_pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.full_pool.get_kv(self.full_layer[layer_id], self._slots(0, end_pos))

    def write_swa_kv(
        self, layer_id: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        slots = self.full_to_swa[self.req_pool.req_to_token[self.row, positions]]
        self.swa_pool.set_kv(self.swa_layer[layer_id], slots, k, v)

    def read_swa_kv(
        self, layer_id: int, start_pos: int, end_pos: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        slots = self.full_to_swa[self._slots(start_pos, end_pos)]
        return self.swa_pool.get_kv(self.swa_layer[layer_id], slots)

    def read_mamba_state(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        i = self.mamba_layer[layer_id]
        return self.conv[i, self.mamba_slot], self.ssm[i, self.mamba_slot]

    def write_mamba_state(self, layer_id: int, conv: torch.Tensor, ssm: torch.Tensor) -> None:
        i = self.mamba_layer[layer_id]
        self.conv[i, self.mamba_slot] = conv
        self.ssm[i, self.mamba_slot] = ssm


@pytest.mark.parametrize("chunk_size", [1, 4, 13])
def test_scattered_pool_slots_give_the_dense_logits(chunk_size: int) -> None:
    model = TinyHybridModel(CONFIG)
    tokens = torch.tensor([9, 4, 300, 17, 17, 250, 3, 88, 1, 42, 500, 6, 71])
    req_pool = ReqToTokenPool(size=2, max_context_len=32)
    row = req_pool.alloc()
    assert row is not None
    scattered = torch.randperm(NUM_SLOTS - 1, generator=torch.Generator().manual_seed(0)) + 1
    req_pool.write(row, 0, scattered[: tokens.numel() + 1])
    store = PoolState(row, req_pool, mamba_slot=2)  # its slot starts as NaN: never read at 0
    rows = [
        model.forward(tokens[s : s + chunk_size], s, store)
        for s in range(0, tokens.numel(), chunk_size)
    ]
    rows.append(model.decode(torch.tensor([5]), [tokens.numel()], [store]))
    dense = DenseRequestState()
    expected = model.forward(torch.cat([tokens, torch.tensor([5])]), 0, dense)
    assert (torch.cat(rows) - expected).abs().max() < 1e-6
