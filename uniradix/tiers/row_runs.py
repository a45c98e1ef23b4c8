"""Row indices of a transfer and the runs of rows that are consecutive on both sides.

Slots are allocated by page, so the rows of one transfer are often consecutive on the
device and on the host at once (a prefix allocated in one go, written to a fresh host
range). Such a run is moved by one `copy_` of two slices: one pass over the bytes, where a
gather then a scatter makes two. `common_runs` finds the runs with a few numpy calls; the
copier then loops over runs (never over pages) only when they are long, see `worth_runs`.
"""

from __future__ import annotations

import numpy as np
import torch

from uniradix.types import Slots

# A Python-level `copy_` costs some 10-40 us on a loaded CPU; a run of at least this many
# bytes takes ~100 us or more to copy, so the loop adds at most a few tens of percent in the
# worst case and nothing measurable for 2 MB rows. Below it the copier gathers/scatters.
MIN_RUN_BYTES = 1 << 20


class Rows:
    """Row indices of one side of a transfer: `start` is the first row when they are one
    ascending run (moved as a slice, no index), and `on(device)` the index tensor (built
    once per device)."""

    def __init__(self, rows: Slots) -> None:
        self.rows = np.ascontiguousarray(rows, dtype=np.int64)
        first = int(rows[0]) if len(rows) else 0
        is_run = len(rows) > 0 and int(rows[-1]) - first == len(rows) - 1
        self.start = first if is_run and bool(np.all(np.diff(rows) == 1)) else None
        self._on: dict[torch.device, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def on(self, device: torch.device) -> torch.Tensor:
        if device not in self._on:
            self._on[device] = torch.from_numpy(self.rows).to(device)
        return self._on[device]


def common_runs(src: Rows, dst: Rows) -> np.ndarray:
    """`[k, 3]` int64 rows `(src start, dst start, length)`: the maximal runs over which both
    `src` and `dst` step by one, in transfer order (`k == 0` for an empty transfer)."""
    if len(src) != len(dst):
        raise ValueError(f"src has {len(src)} rows, dst {len(dst)}")
    n = len(src)
    if n == 0:
        return np.empty((0, 3), dtype=np.int64)
    steps = (np.diff(src.rows) == 1) & (np.diff(dst.rows) == 1)
    starts = np.concatenate(([0], np.flatnonzero(~steps) + 1))
    lengths = np.diff(np.concatenate((starts, [n])))
    return np.stack((src.rows[starts], dst.rows[starts], lengths), axis=1)


def worth_runs(runs: np.ndarray, num_bytes: int) -> bool:
    """Whether copying `runs` one `copy_` each beats a gather and a scatter: the runs average
    at least `MIN_RUN_BYTES`, so the loop makes at most one call per MiB moved."""
    return len(runs) > 0 and len(runs) * MIN_RUN_BYTES <= num_bytes
