import pytest
import torch

from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.req_pool import ReqToTokenPool


def test_page1_alloc_free_reuses_last_freed_first():
    a = TokenSlotAllocator(8)
    assert a.alloc(3).tolist() == [1, 2, 3]
    b = a.alloc(2)
    assert b.tolist() == [4, 5]
    a.free(b)
    assert a.available_size() == 5
    assert a.alloc(2).tolist() == [4, 5]
    assert a.alloc(4) is None
    assert a.available_size() == 3


def test_paged_alloc_hands_out_whole_pages_and_skips_page_zero():
    a = TokenSlotAllocator(16, page_size=4)
    assert a.alloc(8).tolist() == [4, 5, 6, 7, 8, 9, 10, 11]
    with pytest.raises(ValueError, match="multiple of page_size"):
        a.alloc(3)
    a.free(torch.tensor([8, 9]))  # a partial page frees its whole page
    assert a.available_size() == 12
    assert a.alloc(4).tolist() == [8, 9, 10, 11]


def test_double_free_and_foreign_slots_raise_and_change_nothing():
    a = TokenSlotAllocator(8)
    s = a.alloc(2)
    a.free(s)
    with pytest.raises(ValueError, match="not allocated"):
        a.free(s)
    with pytest.raises(ValueError, match="outside"):
        a.free(torch.tensor([0]))
    with pytest.raises(ValueError, match="duplicate"):
        a.free(torch.cat([a.alloc(1), torch.tensor([1])]))
    assert a.available_size() == 7
    with pytest.raises(TypeError):
        a.free([1])  # type: ignore[arg-type]


def test_req_pool_rows():
    pool = ReqToTokenPool(2, 8)
    r1, r2 = pool.alloc(), pool.alloc()
    assert {r1, r2} == {1, 2} and pool.alloc() is None
    pool.write(r1, 2, torch.tensor([7, 8]))
    assert pool.read(r1, 0, 4).tolist() == [0, 0, 7, 8]
    pool.free(r1)
    with pytest.raises(ValueError, match="not allocated"):
        pool.free(r1)
    with pytest.raises(ValueError, match="max_context_len"):
        pool.write(r2, 7, torch.tensor([1, 2]))
