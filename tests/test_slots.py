"""`whole_pages`: the page test the insert check and the invariant checks share, on the
numpy path and on the native module's (the same answer for every input)."""

from __future__ import annotations

import numpy as np
import pytest

from uniradix import native
from uniradix.slots import whole_pages

pytestmark = pytest.mark.usefixtures("python_and_native")


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


def test_negative_and_wrapping_slots_answer_as_numpy_does() -> None:
    # numpy's `%` and int64 subtraction: a run from -16 is whole pages, and a run that wraps
    # past the largest int64 steps by one there.
    assert whole_pages(np.arange(-16, 0, dtype=np.int64), 16)
    assert not whole_pages(np.arange(-15, 1, dtype=np.int64), 16)
    top = np.iinfo(np.int64).max
    wrapped = np.array([top - 1, top, -top - 1, -top], dtype=np.int64)
    assert whole_pages(wrapped, 4) == whole_pages_by_numpy(wrapped, 4)


def test_the_native_pass_agrees_with_numpy_on_random_values() -> None:
    if not native.BUILT:
        pytest.skip("uniradix._native was not built")
    rng = np.random.default_rng(7)
    answers = set()
    for trial in range(400):
        page_size = int(rng.choice([1, 2, 3, 4, 16]))
        slots = pages(list(rng.integers(-3, 50, size=int(rng.integers(1, 6)))), page_size)
        for _ in range(int(rng.integers(0, 3))):  # a few slots moved, some still in place
            slots[rng.integers(len(slots))] += int(rng.integers(-2, 3)) * (trial % 3)
        view = slots[:: int(rng.integers(1, 3))] if trial % 5 == 0 else slots
        if len(view) % page_size:
            continue
        expected = whole_pages_by_numpy(view, page_size)
        assert native.whole_pages(view, page_size) == expected, (view, page_size)
        answers.add(expected)
    assert answers == {True, False}  # both answers were tested


def test_the_native_pass_refuses_what_is_not_whole_runs_of_int64() -> None:
    if not native.BUILT:
        pytest.skip("uniradix._native was not built")
    with pytest.raises(ValueError, match="whole runs of 4"):
        native.whole_pages(np.arange(6, dtype=np.int64), 4)
    with pytest.raises(ValueError, match="int64"):
        native.whole_pages(np.arange(8, dtype=np.int32), 4)
    with pytest.raises(ValueError, match="page_size 0"):
        native.whole_pages(np.arange(8, dtype=np.int64), 0)


def whole_pages_by_numpy(slots: np.ndarray, page_size: int) -> bool:
    """The numpy path, whatever the fixture set."""
    saved = native.HAVE_NATIVE
    native.HAVE_NATIVE = False
    try:
        return whole_pages(slots, page_size)
    finally:
        native.HAVE_NATIVE = saved
