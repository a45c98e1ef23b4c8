"""ReqToTokenPool: one row per running request mapping its positions to KV slots.

`req_to_token[row, i]` is the KV slot of the request's token `i`. Row 0 is reserved padding
(engines point dummy batch entries at it), so rows `1..size` are handed out.
"""

from __future__ import annotations

import numpy as np
import torch

from uniradix.types import Slots


class ReqToTokenPool:
    def __init__(self, size: int, max_context_len: int, device: str = "cpu") -> None:
        if size < 1 or max_context_len < 1:
            raise ValueError(
                f"need size >= 1 and max_context_len >= 1, got {size}, {max_context_len}"
            )
        self.size = size
        self.max_context_len = max_context_len
        self.req_to_token = torch.zeros(
            (size + 1, max_context_len), dtype=torch.int64, device=device
        )
        self._free_rows = list(range(size, 0, -1))
        self._in_use = [False] * (size + 1)
        # A numpy view of the table for the cache's per-step host reads (None off the CPU).
        self._host_table = self.req_to_token.numpy() if self.req_to_token.is_cpu else None

    def available_size(self) -> int:
        return len(self._free_rows)

    def alloc(self) -> int | None:
        """A free row index, or None when every row is taken."""
        if not self._free_rows:
            return None
        row = self._free_rows.pop()
        self._in_use[row] = True
        return row

    def free(self, row: int) -> None:
        if not (1 <= row <= self.size) or not self._in_use[row]:
            raise ValueError(f"free: row {row} is not allocated")
        self._in_use[row] = False
        self._free_rows.append(row)

    def write(self, row: int, start: int, slots: torch.Tensor | Slots) -> None:
        """Sets `req_to_token[row, start : start + len(slots)] = slots` (a tensor, or host
        int64 slots as `TokenSlotAllocator.alloc_host` gives)."""
        end = start + slots.shape[0]
        if not self._in_use[row]:
            raise ValueError(f"write: row {row} is not allocated")
        if start < 0 or end > self.max_context_len:
            raise ValueError(
                f"write: positions [{start}, {end}) exceed max_context_len={self.max_context_len}"
            )
        table = self._host_table
        if table is not None and type(slots) is np.ndarray:
            table[row, start:end] = slots
        elif table is not None and isinstance(slots, torch.Tensor) and slots.is_cpu:
            # Through the numpy view: a torch slice assignment costs ~10x more per call, and
            # the scheduler writes once per request per allocation.
            table[row, start:end] = slots.numpy()
        else:
            self.req_to_token[row, start:end] = torch.as_tensor(slots)

    def read(self, row: int, start: int, end: int) -> torch.Tensor:
        return self.req_to_token[row, start:end]

    def host_read(self, row: int, start: int, end: int) -> Slots:
        """`read` as host int64 slots: a view on the CPU (never write to it), else a copy."""
        if self._host_table is not None:
            return self._host_table[row, start:end]
        return self.req_to_token[row, start:end].cpu().numpy()

    def reset(self) -> None:
        self._free_rows = list(range(self.size, 0, -1))
        self._in_use = [False] * (self.size + 1)
