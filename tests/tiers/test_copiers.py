"""Byte-exact D2H then H2D round trips through every engine, and the copiers' checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.tiers.engines import ENGINES, device_of, drain, make_engine
from tests.tiers.pools import (
    kv_rows,
    random_kv_pool,
    random_mamba_states,
    same_bits,
    scattered_slots,
)
from uniradix.memory.host_kv import HostKVPool, HostMambaStates
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.mamba_pool import MambaStatePool
from uniradix.memory.swa_allocator import SWASlotAllocator
from uniradix.tiers.copiers import KVCopier, MambaCopier
from uniradix.tiers.transfer import CopyOp, Direction

D2H, H2D = Direction.D2H, Direction.H2D


def _assert_same_bytes(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert same_bits(g, w)


@pytest.mark.parametrize("engine_kind", ENGINES)
@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
@pytest.mark.parametrize("page_size", [1, 16])
def test_kv_round_trip_is_byte_exact(engine_kind: str, layout: str, page_size: int) -> None:
    device = device_of(engine_kind)
    num_slots = 40 * page_size
    source = random_kv_pool(num_slots, device, seed=1)
    target = KVPool(num_slots, 3, 2, 8, torch.float16, device)
    host = HostKVPool.like(source, 30 * page_size, page_size, layout)  # type: ignore[arg-type]
    src = scattered_slots(num_slots, page_size, 12, seed=2)
    via = scattered_slots(30 * page_size, page_size, 12, seed=3)
    back = scattered_slots(num_slots, page_size, 12, seed=4)
    engine = make_engine(engine_kind, {"full": KVCopier(source, host)})
    t1 = engine.submit([CopyOp("full", D2H, src, via)])
    assert drain(engine, [t1]) == [t1]
    engine.copiers["full"] = KVCopier(target, host)  # type: ignore[attr-defined]
    t2 = engine.submit([CopyOp("full", H2D, via, back)])
    assert drain(engine, [t2]) == [t2] and engine.failed() == []
    _assert_same_bytes(kv_rows(target, back), kv_rows(source, src))
    # Nothing else was written: the other target slots are still zero.
    untouched = np.setdiff1d(np.arange(num_slots), back)
    assert all(not r.any() for r in kv_rows(target, untouched))
    moved = len(src) * 3 * 2 * 2 * 8 * 2  # tokens x layers x (K, V) x heads x dim x fp16
    assert engine.bytes_moved == {D2H: moved, H2D: moved}
    engine.close()


@pytest.mark.parametrize("engine_kind", ENGINES)
def test_layer_first_moves_single_slots_of_paged_pools(engine_kind: str) -> None:
    device = device_of(engine_kind)
    source, host = random_kv_pool(64, device, seed=5), None
    host = HostKVPool.like(source, 64, 16, "layer_first")
    src, dst = np.array([17, 40, 18, 63]), np.array([33, 16, 62, 20])
    engine = make_engine(engine_kind, {"full": KVCopier(source, host)})
    drain(engine, [engine.submit([CopyOp("full", D2H, src, dst)])])
    for layer in range(3):
        got_k, got_v = host.get_kv(layer, torch.from_numpy(dst))
        assert same_bits(got_k, source.k_buffers[layer].cpu()[src])
        assert same_bits(got_v, source.v_buffers[layer].cpu()[src])
    engine.close()


@pytest.mark.parametrize("engine_kind", ENGINES)
@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
def test_swa_kv_round_trip_with_swa_slots(engine_kind: str, layout: str) -> None:
    device, page = device_of(engine_kind), 4
    allocator = SWASlotAllocator(full_tokens=96, swa_tokens=48, page_size=page)
    allocator.alloc(8)
    full = allocator.alloc(24)
    assert full is not None
    swa_slots = allocator.translate(full)
    swa_pool = random_kv_pool(48 + page, device, seed=6)
    host = HostKVPool.like(swa_pool, 40, page, layout)  # type: ignore[arg-type]
    host_slots = scattered_slots(40, page, 6, seed=7)
    engine = make_engine(engine_kind, {"swa": KVCopier(swa_pool, host)})
    t = engine.submit([CopyOp("swa", D2H, swa_slots, host_slots)])
    drain(engine, [t])
    expected = kv_rows(swa_pool, swa_slots)
    for buf in swa_pool.k_buffers + swa_pool.v_buffers:
        buf.zero_()
    t = engine.submit([CopyOp("swa", H2D, host_slots, swa_slots)])
    assert drain(engine, [t]) == [t]
    _assert_same_bytes(kv_rows(swa_pool, swa_slots), expected)
    engine.close()


@pytest.mark.parametrize("engine_kind", ENGINES)
def test_mamba_round_trip_is_exact(engine_kind: str) -> None:
    device = device_of(engine_kind)
    source = random_mamba_states(6, device, seed=8)
    target = MambaStatePool(6, 3, (4, 3), (2, 5, 2), torch.float32, device)
    host = HostMambaStates.like(source, 4)
    engine = make_engine(engine_kind, {"mamba": MambaCopier(source, host)})
    t1 = engine.submit([CopyOp("mamba", D2H, np.array([5, 2, 3]), np.array([4, 1, 3]))])
    drain(engine, [t1])
    engine.copiers["mamba"] = MambaCopier(target, host)  # type: ignore[attr-defined]
    t2 = engine.submit([CopyOp("mamba", H2D, np.array([4, 1, 3]), np.array([1, 6, 2]))])
    assert drain(engine, [t2]) == [t2]
    for name in ("conv_states", "temporal_states"):
        got, want = getattr(target, name).cpu(), getattr(source, name).cpu()
        assert same_bits(got[:, [1, 6, 2]], want[:, [5, 2, 3]])
        assert not got[:, [0, 3, 4, 5]].any()
    assert engine.bytes_moved[H2D] == 3 * 3 * (4 * 3 + 2 * 5 * 2) * 4
    engine.close()


def test_one_batch_moves_every_pool_of_a_chain() -> None:
    kv, states = random_kv_pool(32, seed=9), random_mamba_states(3, seed=9)
    host_kv, host_states = HostKVPool.like(kv, 16, 4), HostMambaStates.like(states, 2)
    engine = make_engine(
        "thread", {"full": KVCopier(kv, host_kv), "mamba": MambaCopier(states, host_states)}
    )
    ops = [
        CopyOp("full", D2H, np.arange(8, 16), np.arange(4, 12)),
        CopyOp("mamba", D2H, np.array([3]), np.array([2])),
    ]
    ticket = engine.submit(ops)
    assert drain(engine, [ticket]) == [ticket]
    assert same_bits(host_kv.k_buffers[2][4:12], kv.k_buffers[2][8:16])
    assert same_bits(host_states.temporal_states[:, 2], states.temporal_states[:, 3])
    engine.close()


@pytest.mark.parametrize("engine_kind", ENGINES)
def test_zero_layer_pools_move_nothing_and_still_ack(engine_kind: str) -> None:
    host, states = HostKVPool(32, 0, page_size=4), MambaStatePool(3)
    copiers = {
        "full": KVCopier(KVPool(32), host),
        "mamba": MambaCopier(states, HostMambaStates.like(states, 2)),
    }
    engine = make_engine(engine_kind, copiers)
    ops = [
        CopyOp("full", D2H, np.arange(4, 12), np.arange(20, 28)),
        CopyOp("mamba", H2D, np.array([1, 2]), np.array([3, 1])),
    ]
    tickets = [engine.submit(ops), engine.submit([])]
    assert drain(engine, tickets) == tickets
    assert engine.bytes_moved == {D2H: 0, H2D: 0} and engine.failed() == []
    engine.close()


@pytest.mark.parametrize(
    ("direction", "src", "dst", "message"),
    [
        (D2H, [4, 64], [4, 5], "src device slot 64 out of range 4..63"),
        (D2H, [4, 5], [4, 32], "dst host slot 32 out of range 4..31"),
        (H2D, [1, 5], [4, 5], "src host slot 1 out of range"),
        (H2D, [4, 5], [-3, 5], "dst device slot -3"),
        (D2H, [4, 5, 6], [4, 5], "src has 3 entries, dst has 2"),
        (D2H, [4, 5], [7, 7], "dst slot 7 appears twice"),
    ],
)
def test_kv_copier_rejects_bad_indices(
    direction: Direction, src: list[int], dst: list[int], message: str
) -> None:
    copier = KVCopier(random_kv_pool(64), HostKVPool.like(random_kv_pool(8), 32, 4))
    with pytest.raises(ValueError, match=message):
        copier.copy(direction, np.array(src), np.array(dst))


def test_bad_indices_are_checked_without_layers_too() -> None:
    copier = KVCopier(KVPool(16), HostKVPool(16, 0))
    with pytest.raises(ValueError, match="dst host slot 16"):
        copier.copy(D2H, np.array([3]), np.array([16]))


def test_mamba_copier_rejects_padding_and_foreign_slots() -> None:
    copier = MambaCopier(random_mamba_states(4), HostMambaStates(2, 3, (4, 3), (2, 5, 2)))
    with pytest.raises(ValueError, match=r"src device slot 0 out of range 1\.\.4"):
        copier.copy(D2H, np.array([0]), np.array([1]))
    with pytest.raises(ValueError, match=r"dst host slot 3 out of range 1\.\.2"):
        copier.copy(D2H, np.array([1]), np.array([3]))


def test_page_first_refuses_partial_pages() -> None:
    copier = KVCopier(random_kv_pool(64), HostKVPool.like(random_kv_pool(8), 32, 4, "page_first"))
    with pytest.raises(ValueError, match="whole aligned pages of 4"):
        copier.copy(D2H, np.array([5, 6, 7, 8]), np.array([4, 5, 6, 7]))


def test_mismatched_pools_are_refused() -> None:
    with pytest.raises(ValueError, match="layers"):
        KVCopier(random_kv_pool(16), HostKVPool(16, 2, 2, 8, torch.float16))
    with pytest.raises(ValueError, match="differ from host rows"):
        KVCopier(random_kv_pool(16), HostKVPool(16, 3, 2, 8, torch.float32))
    with pytest.raises(ValueError, match="temporal_states"):
        MambaCopier(random_mamba_states(2), HostMambaStates(2, 3, (4, 3), (2, 5, 3)))
    with pytest.raises(TypeError, match="Direction"):
        KVCopier(KVPool(16), HostKVPool(16)).copy("d2h", np.array([1]), np.array([1]))  # type: ignore[arg-type]


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("host_run", [False, True])
def test_staged_path_round_trip_on_the_cpu(layout: str, page_size: int, host_run: bool) -> None:
    """The CUDA path (gather, one copy, host steps deferred to `complete`), run on the CPU."""
    num_slots = 20 * page_size
    source = random_kv_pool(num_slots, seed=11)
    target = KVPool(num_slots, 3, 2, 8, torch.float16)
    host = HostKVPool.like(source, num_slots, page_size, layout)  # type: ignore[arg-type]
    src = scattered_slots(num_slots, page_size, 6, seed=12)
    if host_run:
        via = np.arange(2 * page_size, 8 * page_size)
    else:
        via = scattered_slots(num_slots, page_size, 6, seed=13)
    back = scattered_slots(num_slots, page_size, 6, seed=14)
    down, up = KVCopier(source, host), KVCopier(target, host)
    down.staged = up.staged = True
    launch = down.launch(D2H, src, via)
    assert launch.finish == [] if host_run else len(launch.finish) > 0
    launch.complete()
    assert launch.keep == [] and launch.finish == []
    assert up.copy(H2D, via, back) == launch.num_bytes
    _assert_same_bytes(kv_rows(target, back), kv_rows(source, src))


def test_staged_scatter_to_the_host_waits_for_complete() -> None:
    source = random_kv_pool(64, seed=15)
    host = HostKVPool.like(source, 64, 4, "page_first")
    copier = KVCopier(source, host)
    copier.staged = True
    launch = copier.launch(D2H, np.arange(8, 16), np.array([44, 45, 46, 47, 20, 21, 22, 23]))
    assert not host.k_pages.any()  # type: ignore[union-attr]
    launch.complete()
    got_k, _ = host.get_kv(1, torch.tensor([44, 45, 46, 47, 20, 21, 22, 23]))
    assert same_bits(got_k, source.k_buffers[1][8:16])


def test_staged_mamba_round_trip_on_the_cpu() -> None:
    source = random_mamba_states(5, seed=16)
    target = MambaStatePool(5, 3, (4, 3), (2, 5, 2), torch.float32)
    host = HostMambaStates.like(source, 5)
    down, up = MambaCopier(source, host), MambaCopier(target, host)
    down.staged = up.staged = True
    down.copy(D2H, np.array([4, 1]), np.array([2, 5]))
    up.copy(H2D, np.array([2, 5]), np.array([3, 2]))
    for name in ("conv_states", "temporal_states"):
        assert same_bits(getattr(target, name)[:, [3, 2]], getattr(source, name)[:, [4, 1]])
