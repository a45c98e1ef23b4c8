"""`whole_pages`: the page test the insert check and the invariant checks share."""

from __future__ import annotations

import numpy as np
import pytest

from uniradix.slots import whole_pages


def pages(page_numbers: list[int], page_size: int) -> np.ndarray:
    starts = np.array(page_numbers, dtype=np.int64) * page_size
    return (starts[:, None] + np.arange(page_size)).reshape(-1)


@pytest.mark.parametrize("page_size", [2, 3, 4, 16])
def test_whole_pages_in_any_order_pass(page_size: int) -> None:
    assert whole_pages(pages([5], page_size), page_size)
    assert whole_pages(pages([9, 2, 7, 1], page_size), page_size)
    assert whole_pages(pages([3, 3], page_size), page_size)  # repeats are the frees' business


@pytest.mark.parametrize("page_size", [2, 3, 4, 16])
@pytest.mark.parametrize("where", ["first", "middle", "last", "row_end", "row_start"])
def test_one_wrong_slot_anywhere_fails(page_size: int, where: str) -> None:
    slots = pages([9, 2, 7, 1], page_size)
    position = {
        "first": 0,
        "middle": len(slots) // 2 + 1,
        "last": len(slots) - 1,
        "row_end": page_size - 1,
        "row_start": page_size,
    }[where]
    slots[position] += page_size  # the same offset on another page
    assert not whole_pages(slots, page_size)


@pytest.mark.parametrize("page_size", [2, 3, 4, 16])
def test_runs_that_are_contiguous_but_not_aligned_fail(page_size: int) -> None:
    assert not whole_pages(pages([9, 2], page_size) + 1, page_size)
    # A run straddling two pages: contiguous inside, but it starts mid-page.
    shifted = np.arange(page_size, dtype=np.int64) + 3 * page_size + 1
    assert not whole_pages(np.concatenate([pages([1], page_size), shifted]), page_size)


def test_a_run_spliced_from_two_pages_fails() -> None:
    # Aligned start and end, but the middle comes from another page.
    assert not whole_pages(np.array([32, 33, 10, 35], dtype=np.int64), 4)
    assert not whole_pages(np.array([32, 34, 33, 35], dtype=np.int64), 4)  # shuffled inside


def test_page_size_one_is_always_whole_pages() -> None:
    assert whole_pages(np.array([7, 3, 3, 9], dtype=np.int64), 1)
