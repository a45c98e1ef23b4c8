"""The transfer-engine contract between the controller and whatever moves the bytes.

The controller decides *what* moves (a batch of `CopyOp`s, one per pool, for one node
chain) and *when* it may rely on it (the batch's ticket has been acked); an engine decides
*how*: synchronously (`SyncTransferEngine`, for tests and the replayer), on a worker thread
(CPU) or a CUDA stream with events (GPU). Each pool's bytes are moved by a `Copier`; a pool
without one (a simulation with zero layers) moves no bytes but its batch is acked all the
same, so the controller's bookkeeping is identical with and without tensors.

Contract: `submit` never blocks on a copy it could defer; every ticket is returned by
`poll` exactly once, after all of its copies finished; `wait(ticket)` blocks until it has
finished (it is still returned by `poll` afterwards). A batch whose copy raised is still
returned by `poll` (the exception is logged, the rest of the batch skipped) and then once by
`failed()`: the controller treats it as a miss and releases what it reserved.
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from uniradix.tree.node import TreeNode
from uniradix.types import Slots

log = logging.getLogger(__name__)


class Direction(enum.Enum):
    D2H = "d2h"  # device to host: a backup (write)
    H2D = "h2d"  # host to device: a load-back


@dataclass(frozen=True, slots=True)
class CopyOp:
    """Copy the entries at `src` of pool `pool` on one tier to the entries at `dst` on the
    other (same length; slot indices of each side's own pool, e.g. device KV slots and host
    KV slots for `"full"`, state slots for `"mamba"`)."""

    pool: str
    direction: Direction
    src: Slots
    dst: Slots

    def __post_init__(self) -> None:
        if self.src.shape != self.dst.shape:
            raise ValueError(
                f"CopyOp({self.pool}): src has {self.src.shape[0]} entries, "
                f"dst has {self.dst.shape[0]}"
            )


AuxCopy = tuple[TreeNode, Any, Slots]
"""An auxiliary host copy a batch is filling: the node, its component, the host slots."""


class Copier(Protocol):
    """Moves one pool's entries between its device and host tensors; blocking."""

    def copy(self, direction: Direction, src: Slots, dst: Slots) -> int:
        """Copies and returns the bytes moved."""
        ...


class TransferEngine(Protocol):
    bytes_moved: dict[Direction, int]

    def submit(self, ops: Sequence[CopyOp]) -> int:
        """Queues one batch; returns its ticket."""
        ...

    def poll(self) -> list[int]:
        """Tickets whose copies all finished since the last poll, each exactly once."""
        ...

    def failed(self) -> list[int]:
        """Tickets already returned by `poll` whose batch raised, each exactly once."""
        ...

    def wait(self, ticket: int) -> None:
        """Blocks until `ticket`'s copies finished."""
        ...

    def close(self) -> None:
        """Finishes queued work and releases threads or streams."""
        ...


class SyncTransferEngine:
    """Copies at `submit`; the ticket is acked at the next `poll`."""

    def __init__(self, copiers: Mapping[str, Copier] | None = None) -> None:
        self.copiers = dict(copiers or {})
        self.bytes_moved = {Direction.D2H: 0, Direction.H2D: 0}
        self._tickets = itertools.count(1)
        self._done: list[int] = []
        self._raised: set[int] = set()
        self._failed: list[int] = []

    def submit(self, ops: Sequence[CopyOp]) -> int:
        ticket = next(self._tickets)
        try:
            for op in ops:
                copier = self.copiers.get(op.pool)
                if copier is not None:
                    self.bytes_moved[op.direction] += copier.copy(op.direction, op.src, op.dst)
        except Exception:
            log.exception("transfer batch %d failed", ticket)
            self._raised.add(ticket)
        self._done.append(ticket)
        return ticket

    def poll(self) -> list[int]:
        done, self._done = self._done, []
        self._failed += [ticket for ticket in done if ticket in self._raised]
        self._raised.difference_update(done)
        return done

    def failed(self) -> list[int]:
        failed, self._failed = self._failed, []
        return failed

    def wait(self, ticket: int) -> None:
        return

    def close(self) -> None:
        return
