"""Mamba slot allocator, state tensors and per-request slots."""

from __future__ import annotations

import pytest
import torch

from uniradix.memory.mamba_pool import MambaReqPool, MambaSlotAllocator, MambaStatePool
from uniradix.types import Req


def test_allocator_hands_out_lowest_first_and_reuses_last_freed() -> None:
    allocator = MambaSlotAllocator(4)
    assert allocator.alloc(2).tolist() == [1, 2]  # type: ignore[union-attr]
    assert allocator.alloc_one() == 3
    allocator.free(torch.tensor([1]))
    assert (allocator.available_size(), allocator.used_size()) == (2, 2)
    assert allocator.alloc(2).tolist() == [1, 4]  # type: ignore[union-attr]
    assert allocator.alloc(1) is None
    assert allocator.is_allocated(torch.tensor([0, 1, 5])).tolist() == [False, True, False]


@pytest.mark.parametrize(
    ("slots", "message"),
    [([2], "not allocated"), ([0], "outside"), ([5], "outside"), ([1, 1], "duplicate")],
)
def test_allocator_rejects_bad_frees(slots: list[int], message: str) -> None:
    allocator = MambaSlotAllocator(4)
    allocator.alloc(1)
    with pytest.raises(ValueError, match=message):
        allocator.free(torch.tensor(slots))
    assert allocator.available_size() == 3


@pytest.mark.parametrize(
    ("slots", "message"),
    [([2], "not allocated"), ([0], "outside"), ([5], "outside"), ([1, 1], "duplicate")],
)
def test_free_slots_rejects_what_free_rejects(slots: list[int], message: str) -> None:
    allocator = MambaSlotAllocator(4)
    allocator.alloc_one()
    with pytest.raises(ValueError, match=message):
        allocator.free_slots(slots)
    assert allocator.available_size() == 3


@pytest.mark.parametrize("freed", [[3], [2, 4], [4, 2], [1, 3, 4]])
def test_free_slots_and_alloc_one_keep_the_stack_order_of_free_and_alloc(freed: list[int]) -> None:
    """The per-slot fast paths leave the free stack exactly as the array paths do."""
    fast, arrays = MambaSlotAllocator(6), MambaSlotAllocator(6)
    assert [fast.alloc_one() for _ in range(5)] == arrays.alloc(5).tolist()  # type: ignore[union-attr]
    fast.free_slots(freed)
    arrays.free(torch.tensor(freed))
    assert [fast.alloc_one() for _ in range(len(freed) + 1)] == (
        arrays.alloc(len(freed) + 1).tolist()  # type: ignore[union-attr]
    )
    assert fast.alloc_one() is None


def test_state_copy_and_clear_touch_every_layer() -> None:
    states = MambaStatePool(3, num_layers=2, conv_shape=(2, 3), temporal_shape=(4,))
    assert tuple(states.conv_states.shape) == (2, 4, 2, 3)
    states.conv_states[:, 1] = torch.arange(12.0).view(2, 2, 3)
    states.temporal_states[:, 1] = 7.0
    states.copy(1, 3)
    assert torch.equal(states.conv_states[:, 3], states.conv_states[:, 1])
    assert bool((states.temporal_states[:, 3] == 7.0).all())
    states.clear(1)
    assert not states.conv_states[:, 1].any() and bool((states.temporal_states[:, 3] == 7).all())
    assert states.size_bytes() == (2 * 4 * 6 + 2 * 4 * 4) * 4


def test_zero_layer_states_keep_only_accounting() -> None:
    states = MambaStatePool(5)
    states.copy(1, 2)
    assert (states.num_layers, states.size_bytes()) == (0, 0)


def test_req_pool_gives_a_working_slot_and_empty_tracking_entries() -> None:
    pool = MambaReqPool(MambaSlotAllocator(3), MambaStatePool(3), extra_buffer=True)
    req = Req([1, 2, 3])
    assert pool.alloc_req(req) and (req.mamba_pool_idx, req.mamba_ping_pong) == (1, [None, None])
    assert pool.alloc_req(req) and pool.allocator.available_size() == 2  # has it already
    assert pool.alloc_req(Req([4])) and pool.alloc_req(Req([5])) and not pool.alloc_req(Req([6]))
    pool.free_req(req, keep=1)
    assert pool.held_slots(req) == [] and pool.allocator.available_size() == 0
    pool.free_req(req)
    assert pool.allocator.available_size() == 0


def test_ping_pong_gives_back_the_superseded_track() -> None:
    pool = MambaReqPool(MambaSlotAllocator(4), MambaStatePool(4), extra_buffer=True)
    req = Req(list(range(20)))
    pool.alloc_req(req)
    assert pool.tracked_entry(req, 100) is None and pool.track_slot(req) is None
    with pytest.raises(ValueError, match="no slot"):
        pool.commit_track(req, 8)
    slots = [pool.allocator.alloc_one() for _ in range(3)]
    assert slots == [2, 3, 4]
    pool.set_track_slot(req, 2)
    with pytest.raises(ValueError, match="already"):
        pool.set_track_slot(req, 3)
    pool.commit_track(req, 8)
    assert pool.track_slot(req) is None and pool.tracked_entry(req, 8) == (0, 8)
    pool.set_track_slot(req, 3)  # written while entry 0 still holds the state at 8
    assert pool.held_slots(req) == [1, 2, 3]
    pool.commit_track(req, 16)  # the state at 8 is superseded: slot 2 goes back
    assert pool.held_slots(req) == [1, 3] and pool.allocator.available_size() == 1
    assert pool.tracked_entry(req, 16) == (1, 16)
    assert pool.tracked_entry(req, 12) is None
    with pytest.raises(ValueError, match="positive"):
        pool.commit_track(req, 0)
    assert pool.allocator.alloc_one() == 2  # the slot just given back
    pool.set_track_slot(req, 2)
    with pytest.raises(ValueError, match="not past"):
        pool.commit_track(req, 16)
    pool.free_req(req, keep=4)
    assert pool.allocator.available_size() == 3  # slot 4 was never the request's


def test_tracking_needs_the_extra_buffer() -> None:
    pool = MambaReqPool(MambaSlotAllocator(3), MambaStatePool(3))
    req = Req([1])
    pool.alloc_req(req)
    assert pool.missing_slots(req) == 0 and pool.missing_slots(Req([2])) == 1
    with pytest.raises(ValueError, match="ping-pong"):
        pool.track_slot(req)


def test_state_pool_must_cover_the_slots() -> None:
    with pytest.raises(ValueError, match="rows"):
        MambaReqPool(MambaSlotAllocator(4), MambaStatePool(2))
