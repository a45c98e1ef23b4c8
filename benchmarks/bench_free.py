"""µs per `TokenSlotAllocator.free` on the native path and on the numpy path, interleaved in one
process (the checked free: every page inside the pool, allocated, distinct at page size 1).

Cases: slots as an allocation hands them out (ascending runs, what an insert's duplicates
mostly are), the same shuffled (the sort's worst case), at page size 1 and 16. Each timing
restores the allocator's state first (untimed) and frees the same slots; best of `--repeats`
means of 100 calls. Run: `python -m benchmarks.bench_free [--repeats 7]`.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from uniradix import native
from uniradix.memory.allocator import TokenSlotAllocator

CASES = (
    (1, 1000, False),
    (1, 1000, True),
    (1, 20000, False),
    (16, 1024, False),
    (16, 16384, False),
)


def time_free(
    page_size: int, num_slots: int, shuffled: bool, use_native: bool, repeats: int
) -> float:
    """Best mean µs per free of `num_slots` slots."""
    native.HAVE_NATIVE = use_native
    allocator = TokenSlotAllocator(65536, page_size)
    slots = allocator.alloc_host(num_slots)
    assert slots is not None
    if shuffled:
        np.random.default_rng(0).shuffle(slots)
    top, in_use = allocator._top, allocator._in_use.copy()
    best = float("inf")
    for _ in range(repeats):
        total = 0.0
        for _ in range(100):
            allocator._top = top
            allocator._in_use[:] = in_use
            start = time.perf_counter()
            allocator.free(slots)
            total += time.perf_counter() - start
        best = min(best, total / 100 * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if not native.BUILT:
        raise SystemExit("uniradix._native was not built")
    print("| page | slots | order | numpy µs | native µs |")
    print("|---|---|---|---|---|")
    for page_size, num_slots, shuffled in CASES:
        numpy_us = time_free(page_size, num_slots, shuffled, False, args.repeats)
        native_us = time_free(page_size, num_slots, shuffled, True, args.repeats)
        order = "shuffled" if shuffled else "as allocated"
        print(f"| {page_size} | {num_slots} | {order} | {numpy_us:.1f} | {native_us:.1f} |")


if __name__ == "__main__":
    main()
