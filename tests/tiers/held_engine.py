"""A transfer engine for tests: records every batch and acks a ticket only when the test
releases it, in any order."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from uniradix.tiers.transfer import CopyOp, Direction


class HeldEngine:
    def __init__(self) -> None:
        self.bytes_moved = {Direction.D2H: 0, Direction.H2D: 0}
        self.batches: dict[int, list[CopyOp]] = {}
        self.held: list[int] = []
        self._released: list[int] = []
        self.failing: set[int] = set()  # tickets whose copies "raise" when released
        self._failed: list[int] = []
        self._tickets = itertools.count(1)

    def submit(self, ops: Sequence[CopyOp]) -> int:
        ticket = next(self._tickets)
        self.batches[ticket] = list(ops)
        self.held.append(ticket)
        return ticket

    def release(self, ticket: int) -> None:
        """Acks `ticket`; a no-op once `wait` acked it (`load_back` waits for its batch)."""
        if ticket not in self.held and ticket in self.batches:
            return
        self.held.remove(ticket)
        self._released.append(ticket)

    def poll(self) -> list[int]:
        done, self._released = self._released, []
        self._failed += [t for t in done if t in self.failing]
        return done

    def failed(self) -> list[int]:
        failed, self._failed = self._failed, []
        return failed

    def wait(self, ticket: int) -> None:
        if ticket in self.held:
            self.release(ticket)

    def close(self) -> None:
        return

    def ops(self, ticket: int) -> list[tuple[str, str, list[int], list[int]]]:
        return [
            (op.pool, op.direction.value, op.src.tolist(), op.dst.tolist())
            for op in self.batches[ticket]
        ]
