"""KVPool: the per-layer K and V tensors that KV slots index.

Rows are slots (row 0 and the rest of page 0 are padding). Zero layers is allowed: a
simulation then carries the slot accounting without the memory.
"""

from __future__ import annotations

import torch


def check_rows(num_slots: int, num_layers: int) -> None:
    """The sizes a pool of per-layer tensors indexed by slot accepts (zero layers: a
    simulation's accounting only)."""
    if num_slots < 1 or num_layers < 0:
        raise ValueError(f"need num_slots >= 1 and num_layers >= 0, got {num_slots}, {num_layers}")


class KVPool:
    def __init__(
        self,
        num_slots: int,
        num_layers: int = 0,
        num_kv_heads: int = 1,
        head_dim: int = 1,
        dtype: torch.dtype = torch.float32,
        device: str = "cpu",
    ) -> None:
        check_rows(num_slots, num_layers)
        shape = (num_slots, num_kv_heads, head_dim)
        self.num_slots = num_slots
        self.k_buffers = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v_buffers = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]

    @property
    def num_layers(self) -> int:
        return len(self.k_buffers)

    def size_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k_buffers + self.v_buffers)

    def set_kv(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k_buffers[layer][slots] = k
        self.v_buffers[layer][slots] = v

    def get_kv(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k_buffers[layer][slots], self.v_buffers[layer][slots]
