"""Host pools: layouts, shapes, pinned flag, page bytes for L3."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.tiers.pools import DIM, HEADS, LAYERS, random_kv_pool, random_mamba_states, same_bits
from uniradix.memory.host_kv import HostKVPool, HostMambaStates
from uniradix.memory.kv_pool import KVPool
from uniradix.tiers.copiers import KVCopier
from uniradix.tiers.transfer import Direction


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
def test_shapes_follow_the_layout(layout: str) -> None:
    pool = HostKVPool(64, 2, 4, 8, torch.float16, page_size=16, layout=layout)  # type: ignore[arg-type]
    if layout == "layer_first":
        assert [tuple(b.shape) for b in pool.k_buffers] == [(64, 4, 8)] * 2
        assert pool.k_pages is None
    else:
        assert pool.k_pages is not None and tuple(pool.k_pages.shape) == (4, 2, 16, 4, 8)
        assert pool.k_buffers == []
    assert pool.size_bytes() == 2 * 2 * 64 * 4 * 8 * 2
    assert pool.page_nbytes() == 2 * 2 * 16 * 4 * 8 * 2
    assert not pool.is_pinned()


def test_zero_layers_holds_no_memory() -> None:
    pool = HostKVPool.like(KVPool(32), 48, page_size=4, layout="page_first")
    assert (pool.num_layers, pool.size_bytes(), pool.num_pages) == (0, 0, 12)
    assert pool.page_bytes(np.array([1, 2])).shape == (2, 0)
    states = HostMambaStates(5)
    assert (states.num_layers, states.size_bytes()) == (0, 0)


def test_like_copies_shapes_and_dtype() -> None:
    host = HostKVPool.like(random_kv_pool(32), 64, 4, "page_first")
    assert (host.num_layers, host.num_kv_heads, host.head_dim, host.dtype) == (
        LAYERS,
        HEADS,
        DIM,
        torch.float16,
    )
    states = HostMambaStates.like(random_mamba_states(3), 7)
    assert tuple(states.conv_states.shape) == (LAYERS, 8, 4, 3)
    assert tuple(states.temporal_states.shape) == (LAYERS, 8, 2, 5, 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_slots": 30, "page_size": 4}, "multiple of page_size"),
        ({"num_slots": 4, "page_size": 4}, "padding page"),
        ({"num_slots": 32, "layout": "rows"}, "layout"),
        ({"num_slots": 32, "num_layers": -1}, "num_layers"),
    ],
)
def test_bad_construction(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HostKVPool(**kwargs)  # type: ignore[arg-type]


def test_page_first_reads_whole_pages_only() -> None:
    pool = HostKVPool(64, 2, page_size=16, layout="page_first")
    with pytest.raises(ValueError, match="whole pages of 16"):
        pool.page_rows(0, 1)


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
def test_page_bytes_are_layout_independent_and_round_trip(layout: str) -> None:
    device = random_kv_pool(64)
    host = HostKVPool.like(device, 64, 4, layout)  # type: ignore[arg-type]
    slots = np.arange(4, 64, dtype=np.int64)
    KVCopier(device, host).copy(Direction.D2H, slots, slots)
    pages = np.array([5, 2, 9])
    data = host.page_bytes(pages)
    assert data.dtype == torch.uint8 and tuple(data.shape) == (3, host.page_nbytes())
    # Page layout: K of every layer, then V of every layer, each [page, heads, dim].
    page_5 = data[0].view(torch.float16).view(2, LAYERS, 4, HEADS, DIM)
    for layer in range(LAYERS):
        assert same_bits(page_5[0, layer], device.k_buffers[layer][20:24])
        assert same_bits(page_5[1, layer], device.v_buffers[layer][20:24])
    other = HostKVPool.like(device, 64, 4, layout)  # type: ignore[arg-type]
    other.set_page_bytes(np.array([1, 3, 4]), data)
    for layer in range(LAYERS):
        got_k, got_v = other.get_kv(layer, torch.arange(4, 8))
        assert same_bits(got_k, device.k_buffers[layer][20:24])
        assert same_bits(got_v, device.v_buffers[layer][20:24])


def test_page_bytes_reject_bad_pages_and_data() -> None:
    host = HostKVPool(32, 1, page_size=4)
    with pytest.raises(ValueError, match=r"host page 8 out of range 1\.\.7"):
        host.page_bytes(np.array([1, 8]))
    with pytest.raises(ValueError, match="host page 0"):
        host.page_bytes(np.array([0]))
    with pytest.raises(ValueError, match="uint8"):
        host.set_page_bytes(np.array([1]), torch.zeros(1, 3, dtype=torch.uint8))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_host_copies_of_cuda_pools_are_pinned() -> None:
    host = HostKVPool.like(random_kv_pool(32, "cuda"), 32, 4, "page_first")
    assert host.is_pinned()
    states = HostMambaStates.like(random_mamba_states(3, "cuda"), 3)
    assert states.conv_states.is_pinned() and states.temporal_states.is_pinned()
