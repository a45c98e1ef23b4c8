"""Whole pages: whether a run of slots is made of complete, aligned pages of the pool."""

from __future__ import annotations

import functools

import numpy as np

from uniradix.types import Slots


def whole_pages(slots: Slots, page_size: int) -> bool:
    """Whether `slots` (a multiple of `page_size` long) is whole pages: each run of
    `page_size` is `p * page_size + 0 .. page_size - 1` for some page `p`."""
    rows = slots.reshape(-1, page_size)
    offsets = _offsets(page_size)
    if page_size & (page_size - 1) == 0:
        # A power of two: the row's page start is its first slot with the low bits cleared,
        # so one XOR against start | offsets checks alignment and contiguity at once.
        expected = (rows[:, :1] & ~(page_size - 1)) | offsets
        return not np.count_nonzero(rows ^ expected)
    # Each row minus 0..ps-1 is one constant, a multiple of the page size.
    # (count_nonzero is several times cheaper than .any() on small arrays.)
    starts = rows - offsets
    return not (
        np.count_nonzero(starts - starts[:, :1]) or np.count_nonzero(starts[:, 0] % page_size)
    )


@functools.cache
def _offsets(page_size: int) -> Slots:
    return np.arange(page_size, dtype=np.int64)
