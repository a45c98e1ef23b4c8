"""Asynchronous transfer engines: a worker thread (CPU) and a CUDA stream with events (GPU).

Both keep the `TransferEngine` contract of `tiers/transfer.py`: batches run in submission
order, `poll()` returns each finished ticket exactly once, `wait(ticket)` blocks until it
finished, `close()` finishes queued work first. A copy that raises does not stop the engine
and is not swallowed: the exception is logged, the rest of that batch is skipped, and the
ticket is still returned by `poll()` — and also by `failed()`, which lists (once each) the
tickets already polled whose copies did not all succeed. The controller treats those as a
miss: it releases what it reserved and recomputes.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from uniradix.tiers.copiers import Launch
from uniradix.tiers.transfer import Copier, CopyOp, Direction

log = logging.getLogger(__name__)


class _Acks:
    """Finished tickets not yet polled, and failed ones not yet reported (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.tickets = itertools.count(1)
        self.issued = 0
        self.finished_upto = 0  # batches finish in order: every ticket <= this is done
        self.bytes_moved = {Direction.D2H: 0, Direction.H2D: 0}
        self._ready: list[tuple[int, bool]] = []
        self._failed: list[int] = []

    def issue(self) -> int:
        with self.lock:
            self.issued = next(self.tickets)
            return self.issued

    def finish(self, ticket: int, ok: bool) -> None:
        with self.lock:
            self._ready.append((ticket, ok))
            self.finished_upto = ticket
            self.lock.notify_all()

    def poll(self) -> list[int]:
        with self.lock:
            ready, self._ready = self._ready, []
        self._failed += [ticket for ticket, ok in ready if not ok]
        return [ticket for ticket, _ in ready]

    def failed(self) -> list[int]:
        failed, self._failed = self._failed, []
        return failed

    def check_issued(self, ticket: int) -> None:
        if not isinstance(ticket, int) or not 1 <= ticket <= self.issued:
            raise ValueError(f"ticket {ticket!r} was never issued (last: {self.issued})")


class ThreadTransferEngine:
    """Runs each batch's `Copier.copy` calls on one worker thread, in submission order."""

    def __init__(self, copiers: Mapping[str, Copier] | None = None) -> None:
        self.copiers = dict(copiers or {})
        self._acks = _Acks()
        self.bytes_moved = self._acks.bytes_moved
        self._queue: queue.SimpleQueue[tuple[int, Sequence[CopyOp]] | None] = queue.SimpleQueue()
        self._closed = False
        self._worker = threading.Thread(target=self._run, name="uniradix-transfer", daemon=True)
        self._worker.start()

    def submit(self, ops: Sequence[CopyOp]) -> int:
        if self._closed:
            raise RuntimeError("submit on a closed transfer engine")
        ticket = self._acks.issue()
        self._queue.put((ticket, list(ops)))
        return ticket

    def poll(self) -> list[int]:
        return self._acks.poll()

    def failed(self) -> list[int]:
        """Tickets returned by `poll` whose batch raised, each once."""
        return self._acks.failed()

    def wait(self, ticket: int) -> None:
        self._acks.check_issued(ticket)
        with self._acks.lock:
            self._acks.lock.wait_for(lambda: self._acks.finished_upto >= ticket)

    def close(self) -> None:
        """Runs every queued batch, then stops the worker. Idempotent."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._worker.join()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            ticket, ops = item
            ok = True
            try:
                for op in ops:
                    copier = self.copiers.get(op.pool)
                    if copier is not None:
                        moved = copier.copy(op.direction, op.src, op.dst)
                        with self._acks.lock:
                            self.bytes_moved[op.direction] += moved
            except Exception:
                log.exception("transfer batch %d failed", ticket)
                ok = False
            self._acks.finish(ticket, ok)


@dataclass
class _InFlight:
    ticket: int
    event: torch.cuda.Event
    launches: list[tuple[Direction, Launch]] = field(default_factory=list)
    ok: bool = True


class CudaTransferEngine:
    """Enqueues each batch on one dedicated CUDA stream (after the work already queued on
    the caller's stream, so a backup reads finished KV), records one event per ticket, and
    acks a ticket once `poll` finds its event done and has run the batch's host-side steps.
    Copiers with a `launch` method (`KVCopier`, `MambaCopier`) run asynchronously; any other
    copier's `copy` runs at `submit` on the stream."""

    def __init__(self, copiers: Mapping[str, Copier] | None = None, device: str = "cuda") -> None:
        self.copiers = dict(copiers or {})
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
        self._acks = _Acks()
        self.bytes_moved = self._acks.bytes_moved
        self._in_flight: deque[_InFlight] = deque()

    def submit(self, ops: Sequence[CopyOp]) -> int:
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        entry = _InFlight(self._acks.issue(), event)
        caller = torch.cuda.current_stream(self.device)
        try:
            with torch.cuda.stream(self.stream):
                self.stream.wait_stream(caller)
                for op in ops:
                    copier = self.copiers.get(op.pool)
                    if copier is None:
                        continue
                    launch_fn = getattr(copier, "launch", None)
                    if launch_fn is not None:
                        entry.launches.append(
                            (op.direction, launch_fn(op.direction, op.src, op.dst))
                        )
                    else:
                        moved = copier.copy(op.direction, op.src, op.dst)
                        entry.launches.append((op.direction, Launch(moved)))
        except Exception:
            log.exception("transfer batch %d failed", entry.ticket)
            entry.ok = False
        entry.event.record(self.stream)
        self._in_flight.append(entry)
        return entry.ticket

    def poll(self) -> list[int]:
        while self._in_flight and self._in_flight[0].event.query():  # type: ignore[no-untyped-call]
            self._complete(self._in_flight.popleft())
        return self._acks.poll()

    def failed(self) -> list[int]:
        """Tickets returned by `poll` whose batch raised, each once."""
        return self._acks.failed()

    def wait(self, ticket: int) -> None:
        self._acks.check_issued(ticket)
        while self._in_flight and self._in_flight[0].ticket <= ticket:
            entry = self._in_flight.popleft()
            entry.event.synchronize()
            self._complete(entry)

    def close(self) -> None:
        """Finishes every batch in flight; they are acked by the next `poll`."""
        if self._in_flight:
            self.wait(self._in_flight[-1].ticket)

    def _complete(self, entry: _InFlight) -> None:
        for direction, launch in entry.launches:
            try:
                launch.complete()
            except Exception:
                log.exception("transfer batch %d failed on the host side", entry.ticket)
                entry.ok = False
                continue
            self.bytes_moved[direction] += launch.num_bytes
        self._acks.finish(entry.ticket, entry.ok)
