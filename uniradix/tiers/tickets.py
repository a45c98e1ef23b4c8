"""Tickets: the acks of the host tier's submitted batches, drained from its transfer engine
at the points the scheduler chooses (`HostTier.writing_check`, `loading_check`, a
load-back's own wait). A ticket stays acked until its batch is committed or undone
(`settle`), so a load-back that waited for its ack leaves the commit to `loading_check`."""

from __future__ import annotations

from uniradix.tiers.transfer import TransferEngine


class Tickets:
    def __init__(self) -> None:
        self._acked: set[int] = set()
        self._failed: set[int] = set()  # acked tickets whose copies raised

    def poll(self, engine: TransferEngine) -> None:
        """Takes in `engine`'s acks and failures so far."""
        self._acked.update(engine.poll())
        self._failed.update(engine.failed())

    def acked(self, ticket: int) -> bool:
        return ticket in self._acked

    def failed(self, ticket: int) -> bool:
        """Whether the acked `ticket`'s copy raised."""
        return ticket in self._failed

    def settle(self, ticket: int) -> bool:
        """Forgets the acked `ticket` (its batch is being committed or undone); returns
        whether its copy raised."""
        self._acked.discard(ticket)
        failed = ticket in self._failed
        self._failed.discard(ticket)
        return failed

    def wait(self, engine: TransferEngine, ticket: int) -> None:
        """Blocks until `ticket`'s batch is acked, and takes `engine`'s acks in."""
        engine.wait(ticket)
        self.poll(engine)

    def clear(self) -> None:
        self._acked.clear()
        self._failed.clear()
