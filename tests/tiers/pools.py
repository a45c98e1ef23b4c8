"""Small device/host pool pairs with random contents, shared by the tier tests."""

from __future__ import annotations

import numpy as np
import torch

from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.host_kv import HostKVPool, Layout
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.mamba_pool import MambaStatePool

LAYERS, HEADS, DIM = 3, 2, 8


def random_kv_pool(
    num_slots: int, device: str = "cpu", dtype: torch.dtype = torch.float16, seed: int = 0
) -> KVPool:
    pool = KVPool(num_slots, LAYERS, HEADS, DIM, dtype, device)
    gen = torch.Generator().manual_seed(seed)
    for buf in pool.k_buffers + pool.v_buffers:
        fill_random_bits(buf, gen)
    return pool


def fill_random_bits(tensor: torch.Tensor, gen: torch.Generator) -> None:
    """Every bit pattern, NaNs and infinities included: a copy that goes through float
    arithmetic anywhere would not reproduce them."""
    bits = torch.randint(0, 256, (tensor.numel() * tensor.element_size(),), generator=gen)
    tensor.view(-1).view(torch.uint8).copy_(bits.to(torch.uint8))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes, dtypes and bytes (NaN payloads included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.cpu().contiguous(), b.cpu().contiguous()
    return torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8))


def random_mamba_states(num_slots: int, device: str = "cpu", seed: int = 0) -> MambaStatePool:
    states = MambaStatePool(num_slots, LAYERS, (4, 3), (2, 5, 2), torch.float32, device)
    gen = torch.Generator().manual_seed(seed)
    for t in (states.conv_states, states.temporal_states):
        fill_random_bits(t, gen)
    return states


def host_pool(device_pool: KVPool, num_slots: int, page_size: int, layout: Layout) -> HostKVPool:
    return HostKVPool.like(device_pool, num_slots, page_size, layout)


def scattered_slots(num_slots: int, page_size: int, num_pages: int, seed: int) -> np.ndarray:
    """Slots of `num_pages` pages taken from a shuffled allocator: non-contiguous, in an
    order no sort recovers."""
    allocator = TokenSlotAllocator(num_slots - page_size, page_size)
    taken = allocator.alloc_pages(allocator.num_pages)
    assert taken is not None
    pages = taken.numpy().reshape(-1, page_size)
    order = np.random.default_rng(seed).permutation(len(pages))[:num_pages]
    return pages[order].reshape(-1)


def kv_rows(pool: KVPool, slots: np.ndarray) -> list[torch.Tensor]:
    index = torch.from_numpy(slots)
    return [buf.cpu()[index] for buf in pool.k_buffers + pool.v_buffers]
