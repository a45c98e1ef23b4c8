"""Runs of rows consecutive on both sides: detection, the choice of path, byte-exact moves."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

import uniradix.tiers.copiers as copiers
from tests.tiers.pools import fill_random_bits, same_bits
from uniradix import native
from uniradix.memory.host_kv import HostKVPool
from uniradix.memory.kv_pool import KVPool
from uniradix.tiers.copiers import KVCopier
from uniradix.tiers.row_runs import MIN_RUN_BYTES, Rows, common_runs, worth_runs
from uniradix.tiers.transfer import Direction

needs_native = pytest.mark.skipif(not native.BUILT, reason="uniradix._native was not built")
HEADS, DIM = 8, 128  # 2 KiB per token per layer in fp16: 512 consecutive tokens make 1 MiB
RUN_TOKENS = MIN_RUN_BYTES // (HEADS * DIM * 2)


def test_common_runs_break_where_either_side_jumps() -> None:
    src, dst = Rows(np.array([3, 4, 5, 9, 10, 2])), Rows(np.array([7, 8, 1, 2, 3, 4]))
    assert common_runs(src, dst).tolist() == [[3, 7, 2], [5, 1, 1], [9, 2, 2], [2, 4, 1]]
    whole = Rows(np.arange(5, 12))
    assert common_runs(whole, Rows(np.arange(20, 27))).tolist() == [[5, 20, 7]]
    assert common_runs(Rows(np.array([], dtype=np.int64)), Rows(np.array([]))).shape == (0, 3)
    with pytest.raises(ValueError, match="src has 2 rows, dst 1"):
        common_runs(Rows(np.array([1, 2])), Rows(np.array([1])))


def test_runs_are_worth_it_only_when_they_average_the_minimum() -> None:
    two_runs = np.array([[1, 1, 4], [9, 9, 4]])
    assert worth_runs(two_runs, 2 * MIN_RUN_BYTES)
    assert not worth_runs(two_runs, 2 * MIN_RUN_BYTES - 1)
    assert not worth_runs(np.empty((0, 3), dtype=np.int64), MIN_RUN_BYTES)


@pytest.fixture
def path_taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Records, per moved view, whether the copier took the run path."""
    taken: list[bool] = []

    def spy(runs: np.ndarray, num_bytes: int) -> bool:
        taken.append(worth_runs(runs, num_bytes))
        return taken[-1]

    monkeypatch.setattr(copiers, "worth_runs", spy)
    yield taken


def _pools(page_size: int, layout: str, pages: int, on: str) -> tuple[KVPool, HostKVPool]:
    num_slots = (pages + 1) * page_size
    device = KVPool(num_slots, 2, HEADS, DIM, torch.float16, on)
    gen = torch.Generator().manual_seed(page_size)
    for buf in device.k_buffers + device.v_buffers:
        fill_random_bits(buf, gen)
    return device, HostKVPool.like(device, num_slots, page_size, layout)  # type: ignore[arg-type]


def _page_slots(pages: np.ndarray, page_size: int) -> np.ndarray:
    return (pages[:, None] * page_size + np.arange(page_size)).reshape(-1)


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("pattern", ["runs", "fragmented"])
@pytest.mark.parametrize("use_native", [False, pytest.param(True, marks=needs_native)])
def test_round_trip_through_runs_or_gather_is_byte_exact(
    layout: str, page_size: int, pattern: str, use_native: bool, device: str, path_taken: list[bool]
) -> None:
    if use_native and device != "cpu":
        pytest.skip("the native loop copies CPU tensors only")
    run_pages = RUN_TOKENS // page_size
    pool_pages = 4 * run_pages
    pool, host = _pools(page_size, layout, pool_pages, device)
    rng = np.random.default_rng(7)
    if pattern == "runs":  # two runs of 1 MiB per layer, in swapped order on the host
        dev_pages = np.concatenate(
            (np.arange(1, 1 + run_pages), 2 * run_pages + np.arange(run_pages))
        )
        host_pages = np.concatenate(
            (run_pages + 1 + np.arange(run_pages), np.arange(1, 1 + run_pages))
        )
    else:
        dev_pages = rng.permutation(np.arange(1, pool_pages + 1))[: 2 * run_pages]
        host_pages = rng.permutation(np.arange(1, pool_pages + 1))[: 2 * run_pages]
    dev_slots, host_slots = _page_slots(dev_pages, page_size), _page_slots(host_pages, page_size)
    copier = KVCopier(pool, host)
    copier.use_native = use_native
    moved = copier.copy(Direction.D2H, dev_slots, host_slots)
    assert moved == len(dev_slots) * 2 * 2 * HEADS * DIM * 2
    # K and V of two layers; on CUDA a page_first pool moves per tensor (no per-view path);
    # the native loop copies runs and single rows alike, with no choice of torch path.
    torch_views = not (device == "cuda" and layout == "page_first") and not use_native
    views = 4 if torch_views else 0
    assert path_taken == [pattern == "runs"] * views
    index = torch.from_numpy(dev_slots).to(device)
    for layer in range(2):
        got_k, got_v = host.get_kv(layer, torch.from_numpy(host_slots))
        assert same_bits(got_k, pool.k_buffers[layer][index])
        assert same_bits(got_v, pool.v_buffers[layer][index])
    # Back into a fresh device pool, the pages in ascending order, then compare.
    target = KVPool(pool.num_slots, 2, HEADS, DIM, torch.float16, device)
    back = _page_slots(np.sort(dev_pages), page_size)
    copier = KVCopier(target, host)
    copier.use_native = use_native
    copier.copy(Direction.H2D, host_slots, back)
    assert path_taken == [pattern == "runs"] * 2 * views
    back_index = torch.from_numpy(back).to(device)
    for layer in range(2):
        assert same_bits(target.k_buffers[layer][back_index], pool.k_buffers[layer][index])
        assert same_bits(target.v_buffers[layer][back_index], pool.v_buffers[layer][index])
    untouched = torch.from_numpy(np.setdiff1d(np.arange(target.num_slots), back)).to(device)
    assert not any(b[untouched].any() for b in target.k_buffers + target.v_buffers)
