"""SWASlotAllocator: paired allocation, the three free kinds, pages, and refusal of bad frees."""

import pytest
import torch

from uniradix.memory.swa_allocator import SWASlotAllocator


def t(*xs: int) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.int64)


def test_alloc_pairs_slots_and_maps_full_to_swa() -> None:
    a = SWASlotAllocator(full_tokens=8, swa_tokens=4)
    full = a.alloc(3)
    assert full is not None
    assert full.tolist() == [1, 2, 3]
    assert a.translate(full).tolist() == [1, 2, 3]
    assert (a.full_available_size(), a.swa_available_size(), a.available_size()) == (5, 1, 1)
    assert a.used_size() == 3 and a.swa_used_size() == 3


def test_alloc_short_in_swa_takes_nothing() -> None:
    a = SWASlotAllocator(full_tokens=8, swa_tokens=4)
    assert a.alloc(5) is None
    assert (a.full_available_size(), a.swa_available_size()) == (8, 4)
    with pytest.raises(ValueError, match="alloc"):
        a.alloc(-1)


def test_free_swa_then_full_only() -> None:
    a = SWASlotAllocator(full_tokens=8, swa_tokens=4)
    full = a.alloc(4)
    assert full is not None
    a.free_swa(full[:2])
    assert a.translate(full).tolist() == [0, 0, 3, 4]
    assert (a.full_available_size(), a.swa_available_size()) == (4, 2)
    with pytest.raises(ValueError, match="no SWA peer"):
        a.free_swa(full[:1])  # already freed: a double free is refused
    with pytest.raises(ValueError, match="still have SWA peers"):
        a.free_full_only(full[2:])  # would leak the SWA slots
    a.free_full_only(full[:2])
    a.free(full[2:])
    assert (a.full_available_size(), a.swa_available_size()) == (8, 4)
    assert int(abs(a.full_to_swa).sum()) == 0


def test_free_both_skips_peers_already_freed() -> None:
    a = SWASlotAllocator(full_tokens=8, swa_tokens=4)
    full = a.alloc(4)
    assert full is not None
    a.free_swa(full[1:3])
    a.free(full)
    assert (a.full_available_size(), a.swa_available_size()) == (8, 4)


def test_stale_mapping_never_frees_a_reused_swa_slot() -> None:
    a = SWASlotAllocator(full_tokens=8, swa_tokens=2)
    first = a.alloc(2)
    assert first is not None
    a.free_swa(first)  # SWA slots 1, 2 go back; first keeps its full slots
    second = a.alloc(2)
    assert second is not None
    assert second.tolist() == [3, 4] and a.translate(second).tolist() == [1, 2]
    a.free(first)  # must not touch SWA slots 1, 2, now second's
    assert a.translate(second).tolist() == [1, 2]
    assert a.swa_available_size() == 0
    a.free(second)
    assert (a.full_available_size(), a.swa_available_size()) == (8, 2)


def test_bad_free_changes_nothing() -> None:
    a = SWASlotAllocator(full_tokens=8, swa_tokens=4)
    full = a.alloc(2)
    assert full is not None
    with pytest.raises(ValueError, match="not allocated"):
        a.free(t(1, 2, 5))
    with pytest.raises(ValueError, match="outside"):
        a.free(t(99))
    with pytest.raises(TypeError):
        a.translate(torch.tensor([1.0]))
    assert a.translate(full).tolist() == [1, 2]
    assert (a.full_available_size(), a.swa_available_size()) == (6, 2)


def test_pages_pair_whole_pages() -> None:
    a = SWASlotAllocator(full_tokens=16, swa_tokens=8, page_size=4)
    x = a.alloc(4)
    y = a.alloc(4)
    assert x is not None and y is not None
    assert x.tolist() == [4, 5, 6, 7] and y.tolist() == [8, 9, 10, 11]
    a.free_swa(x)
    z = a.alloc(4)
    assert z is not None
    assert z.tolist() == [12, 13, 14, 15] and a.translate(z).tolist() == [4, 5, 6, 7]
    with pytest.raises(ValueError, match="multiple of page_size"):
        a.alloc(3)
    a.free_swa(y[2:])  # a partial page frees its whole page
    assert a.translate(y).tolist() == [0, 0, 0, 0]
    assert a.swa_available_size() == 4


def test_move_swa_hands_peers_to_kept_slots() -> None:
    a = SWASlotAllocator(full_tokens=8, swa_tokens=4)
    kept = a.alloc(2)
    assert kept is not None
    a.free_swa(kept)
    incoming = a.alloc(2)
    assert incoming is not None
    assert a.translate(incoming).tolist() == [1, 2]
    a.move_swa(torch.stack([kept, incoming]))
    assert a.translate(kept).tolist() == [1, 2]
    assert not a.is_allocated(incoming).any()
    assert (a.full_available_size(), a.swa_available_size()) == (6, 2)
    with pytest.raises(ValueError, match="must have no SWA peers"):
        a.move_swa(torch.stack([kept, kept]))


def test_reset_returns_everything() -> None:
    a = SWASlotAllocator(full_tokens=8, swa_tokens=4, page_size=2)
    assert a.alloc(4) is not None
    a.reset()
    assert (a.full_available_size(), a.swa_available_size()) == (8, 4)
    assert int(abs(a.full_to_swa).sum()) == 0
