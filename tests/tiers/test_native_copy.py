"""The native row copy: the copier's native path moves the same bytes as its torch path, and
the native wrapper (and the compiled function under it) refuses what could read or write
out of bounds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.tiers.pools import fill_random_bits, random_kv_pool, random_mamba_states, same_bits
from uniradix import native
from uniradix.memory.host_kv import HostKVPool, HostMambaStates
from uniradix.memory.kv_pool import KVPool
from uniradix.tiers.copiers import KVCopier, MambaCopier
from uniradix.tiers.transfer import Direction

pytestmark = pytest.mark.skipif(not native.BUILT, reason="uniradix._native was not built")
D2H, H2D = Direction.D2H, Direction.H2D


def _page_slots(pages: np.ndarray, page_size: int) -> np.ndarray:
    return (pages[:, None] * page_size + np.arange(page_size)).reshape(-1)


def _pool_bytes(pool: KVPool | HostKVPool) -> list[torch.Tensor]:
    if isinstance(pool, HostKVPool) and pool.k_pages is not None and pool.v_pages is not None:
        return [pool.k_pages.clone(), pool.v_pages.clone()]
    return [b.clone() for b in pool.k_buffers + pool.v_buffers]


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("direction", [D2H, H2D])
@pytest.mark.parametrize("streaming", [None, False, True])
def test_native_copy_equals_the_torch_copy(
    monkeypatch: pytest.MonkeyPatch,
    layout: str,
    page_size: int,
    direction: Direction,
    streaming: bool | None,
) -> None:
    """Random page maps (scattered, runs on both sides, a run on one side) into pools
    full of random bits: the native copier leaves both pools exactly as torch does."""
    if streaming is not None:  # force the store kind whatever the size
        real = native.copy_row_runs
        monkeypatch.setattr(
            native, "copy_row_runs", lambda pairs, runs, _s=None: real(pairs, runs, streaming)
        )
    pages = 24
    num_slots = (pages + 1) * page_size
    rng = np.random.default_rng(page_size + (direction is D2H))
    for trial in range(6):
        count = int(rng.integers(1, pages))
        if trial % 3 == 0:  # consecutive on both sides
            dev = np.arange(1, count + 1) + int(rng.integers(0, pages - count + 1))
            host = np.arange(1, count + 1)
        elif trial % 3 == 1:  # a host run, scattered device pages
            dev, host = rng.permutation(np.arange(1, pages + 1))[:count], np.arange(1, count + 1)
        else:
            dev = rng.permutation(np.arange(1, pages + 1))[:count]
            host = rng.permutation(np.arange(1, pages + 1))[:count]
        dev_slots, host_slots = _page_slots(dev, page_size), _page_slots(host, page_size)
        src, dst = (dev_slots, host_slots) if direction is D2H else (host_slots, dev_slots)
        results = []
        for use_native in (False, True):
            device = random_kv_pool(num_slots, seed=trial)
            host_pool = HostKVPool.like(device, num_slots, page_size, layout)  # type: ignore[arg-type]
            for t in _host_tensors(host_pool):
                fill_random_bits(t, torch.Generator().manual_seed(100 + trial))
            copier = KVCopier(device, host_pool)
            copier.use_native = use_native
            moved = copier.copy(direction, src, dst)
            results.append((moved, _pool_bytes(device), _pool_bytes(host_pool)))
        (moved_torch, dev_torch, host_torch), (moved_native, dev_native, host_native) = results
        assert moved_native == moved_torch == len(src) * 3 * 2 * 2 * 8 * 2
        assert all(same_bits(a, b) for a, b in zip(dev_native, dev_torch, strict=True))
        assert all(same_bits(a, b) for a, b in zip(host_native, host_torch, strict=True))


def _host_tensors(host: HostKVPool) -> list[torch.Tensor]:
    if host.k_pages is not None and host.v_pages is not None:
        return [host.k_pages, host.v_pages]
    return [*host.k_buffers, *host.v_buffers]


def test_native_mamba_copy_equals_the_torch_copy() -> None:
    results = []
    for use_native in (False, True):
        source = random_mamba_states(6, seed=8)
        host = HostMambaStates.like(source, 5)
        copier = MambaCopier(source, host)
        copier.use_native = use_native
        moved = copier.copy(D2H, np.array([5, 2, 3]), np.array([4, 1, 3]))
        moved += copier.copy(H2D, np.array([4, 1]), np.array([1, 6]))
        results.append((moved, source.conv_states.clone(), source.temporal_states.clone()))
    assert results[0][0] == results[1][0] == 5 * 3 * (4 * 3 + 2 * 5 * 2) * 4
    assert same_bits(results[0][1], results[1][1]) and same_bits(results[0][2], results[1][2])


def test_out_of_range_pages_raise_before_any_byte_moves() -> None:
    device = random_kv_pool(9 * 4, seed=1)
    host = HostKVPool.like(device, 5 * 4, 4, "page_first")
    copier = KVCopier(device, host)
    copier.use_native = True
    with pytest.raises(ValueError, match=r"dst host slot 20 out of range 4\.\.19"):
        copier.copy(D2H, np.arange(4, 8), np.arange(20, 24))
    assert not host.k_pages.any()  # type: ignore[union-attr]


def _rows(num_rows: int, width: int = 8, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    return torch.arange(num_rows * width, dtype=torch.float32).to(dtype).view(num_rows, width)


def test_wrapper_refuses_bad_runs_and_tensors() -> None:
    src, dst = _rows(4), torch.zeros(6, 8, dtype=torch.float16)
    ok = np.array([[0, 2, 2]])
    assert native.copy_row_runs([(src, dst)], ok) == 2 * 8 * 2
    assert torch.equal(dst[2:4], src[0:2]) and not dst[:2].any() and not dst[4:].any()
    cases = [
        ([(src, dst)], np.array([[3, 0, 2]]), "run of 2 rows from source row 3"),
        ([(src, dst)], np.array([[0, 5, 2]]), "to destination row 5 is out of range"),
        ([(src, dst)], np.array([[-1, 0, 1]]), "source row -1"),
        ([(src, dst)], np.array([[0, 0, -1]]), "run of -1 rows"),
        ([(src, dst)], np.array([1, 2, 3]), r"runs must be \[n, 3\]"),
        ([(src, dst.float())], ok, "source rows 8 x torch.float16, destination rows 8 x"),
        ([(src, dst[:, :4])], ok, "source rows 8 x torch.float16, destination rows 4"),
        ([(src.t(), dst)], ok, r"source's rows are not contiguous \(\(1, 8\)\)"),
        ([(src, dst.view(6, 2, 4))], ok, "the destination has 3 dimensions, not 2"),
        ([(src.to("meta"), dst)], ok, "the source is on meta, not the CPU"),
    ]
    for pairs, runs, message in cases:
        with pytest.raises(ValueError, match=message):
            native.copy_row_runs(pairs, runs)
    assert not dst[:2].any() and not dst[4:].any()


def test_compiled_function_checks_bounds_itself() -> None:
    """Called without the wrapper, the C code still refuses runs out of range."""
    module = native._get()
    src = np.arange(32, dtype=np.uint8).reshape(4, 8)
    dst = np.zeros((3, 8), dtype=np.uint8)
    for s, d, k in ((2, 0, 3), (0, 2, 2), (-1, 0, 1), (0, 0, -2), (1 << 62, 0, 1)):
        with pytest.raises(ValueError, match="out of range"):
            module.copy_row_runs([(src, dst)], np.array([[s, d, k]], dtype=np.int64))
    assert not dst.any()
    with pytest.raises(ValueError, match="int64 triples"):
        module.copy_row_runs([(src, dst)], np.array([1, 2], dtype=np.int64))
    with pytest.raises(ValueError, match="rows overlap"):
        module.copy_row_runs([(np.lib.stride_tricks.as_strided(src, (4, 8), (4, 1)), dst)], b"")
    with pytest.raises(ValueError, match="contiguous rows"):
        module.copy_row_runs([(src[:, ::2], dst[:, :4])], b"")
    with pytest.raises(ValueError, match="source rows of 8 bytes, destination 4"):
        module.copy_row_runs([(src, dst[:, :4])], b"")
    with pytest.raises(ValueError, match="not a \\(source, destination\\) tuple"):
        module.copy_row_runs([src], b"")
    with pytest.raises(BufferError):  # a read-only destination
        module.copy_row_runs([(src, bytes(24))], b"")
    module.copy_row_runs([(src, dst)], np.array([[1, 0, 3]], dtype=np.int64), 1)
    assert (dst == src[1:]).all()
