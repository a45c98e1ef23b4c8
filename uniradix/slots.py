"""`Slots`, the array type of pool slot indices, and `whole_pages`, the page test of slot
arrays. Its own module at the bottom of the layers: tree nodes (`uniradix.tree.node`) hold
slots, and the params and results of `uniradix.types` hold both slots and nodes."""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from uniradix import native

Slots = npt.NDArray[np.int64]
"""Pool indices as the tree keeps them: a 1-D int64 numpy array on the host.

Index bookkeeping stays on the host whatever the pool's device (numpy slices and
concatenates in a fraction of torch's per-call cost); results handed to callers are torch
tensors on the pool's device."""


@functools.cache
def int64_operand(x: int) -> npt.NDArray[np.int64]:
    """`x` as a read-only 0-d int64 array: a ufunc operand that skips the conversion and the
    promotion rules a Python int goes through (about half a ufunc call's cost on these
    arrays of a few thousand slots)."""
    operand = np.array(x, dtype=np.int64)
    operand.flags.writeable = False
    return operand


def whole_pages(slots: Slots, page_size: int) -> bool:
    """Whether `slots` (a multiple of `page_size` long, at least one page) is whole pages:
    each run of `page_size` is `p * page_size + 0 .. page_size - 1` for some page `p`, i.e.
    every run starts on a page boundary and inside a run each slot follows the one before::

        slots  32 33 34 35 | 8 9 10 11      (page_size 4: pages 8 and 2)
        steps    1  1  1  *  1 1  1         (* a run's last step: any value)

    (Flat passes over the slots: broadcasting against `page_size`-wide rows costs several
    times more at page 16, and count_nonzero is several times cheaper than .any().) A run's
    last step may be anything, so it holds the next run's start modulo `page_size` instead:
    one count of nonzero `step - 1` covers both tests, with no boolean array made. With the
    native module, one pass in C gives the same answer (about a tenth of the numpy calls'
    cost on an insert's value of ~1,000 slots)."""
    if native.HAVE_NATIVE:
        return native.whole_pages(slots, page_size)
    steps = slots[1:] - slots[:-1]
    steps -= int64_operand(1)
    steps[page_size - 1 :: page_size] = slots[page_size::page_size] % int64_operand(page_size)
    return not (np.count_nonzero(steps) or int(slots[0]) % page_size)
