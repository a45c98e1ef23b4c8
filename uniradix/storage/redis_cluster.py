"""A batch of per-key commands on a Redis Cluster at the speed of one Redis.

redis-py's cluster pipeline builds Python objects per command and visits the masters one
after another (a round trip each): on the replay's batches a 3-master local cluster took
~5x the wall of one Redis. Here a batch is grouped by hash slot into the masters holding
the slots (a table of redis-py's slot map), each master gets one hand-packed pipeline
(`redis_wire`) on its own connection, and every master's commands are sent before any
reply is read, so the masters work at the same time while one thread sends and reads the
same bytes as it would with one Redis (no thread hand-offs: they cost more than they saved
on small batches). A lookup (`MGET`, `EXISTS`) sends one multi-key command per slot: the
pages of a chain share a hash tag per group of pages (`uniradix.hashing.storage_keys`), so
a batch of them is a few commands, as on one Redis, not one per page.

The slot map can be stale: a slot moved (`MOVED` / `ASK`), a replica took over from a
master that died (its connection fails, or it answers `CLUSTERDOWN` / `TRYAGAIN` during the
failover). Then the slot map is refreshed once and the affected pages are sent again, once.
A page still redirected after that is a miss for the caller (absent, not stored); a master
still lost, or a cluster still down, fails the whole call (the backend counts a store
failure, and its breaker turns L3 off when failures go on). The whole call, refresh and
second attempt included, keeps to the backend's deadline (`redis_deadline`), so a call never
hangs: a master that stops answering costs at most the call's timeout (not retried).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from itertools import chain, repeat
from typing import Any

import numpy as np
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    RedisError,
    TryAgainError,
)

from uniradix.storage.redis_slots import SLOTS, group_by_master, key_slot, shared_tag, tag_slot
from uniradix.storage.redis_wire import NameBlock, Reply, Sent, receive, send

__all__ = ["NODE_LOST", "REDIRECTED", "ClusterBatches", "Packer", "key_slot"]

Packer = Callable[[Sequence[int]], Sequence[bytes | memoryview]]
"""Packs the commands for the pages at these indices of the batch, in that order."""

REDIRECTED = (AskError, TryAgainError)  # `MovedError` is an `AskError`
"""Replies meaning "not on this master now": a miss once the retry is spent."""
_STALE_MAP = (*REDIRECTED, ClusterDownError)
# A master that refused or dropped the connection (killed, restarted, replaced): the map may
# be stale, worth one refresh. A timeout is not retried: a master that stopped answering
# would cost its timeout again.
NODE_LOST = (redis.exceptions.ConnectionError, OSError)


class ClusterBatches:
    """Runs batches of single-key commands (one per page) on a cluster's masters. Thread-safe:
    each call uses its own connections."""

    def __init__(self, client: RedisCluster) -> None:
        self.client = client
        self.refreshes = 0  # slot map refreshes after a redirection or a lost master
        # The slot map's dict, and built from it: slot -> index of its master (-1: none) as
        # an array, the masters, and the same table as a list (`group_by_master` reads both).
        # One tuple, replaced whole: threads read it without a lock.
        self._table: tuple[object, np.ndarray, list[ClusterNode], list[int]] = (
            None,
            np.empty(0),
            [],
            [],
        )

    def run(self, names: NameBlock, pack: Packer) -> list[Reply]:
        """One reply per name, in order (see `redis_wire.Reply`), from one command per name; a
        reply that is still a redirection after the one retry is left as it is
        (`REDIRECTED`): the caller's miss. Raises the store failure when a master stays
        unreachable or the cluster stays down."""
        replies: list[Reply] = [None] * len(names)
        for pages, got in self._retried(names, pack, by_slot=False):
            if len(pages) == len(replies):  # the batch on one master: no Python per page
                replies = got
            else:
                deque(map(replies.__setitem__, pages, got), maxlen=0)
        return replies

    def run_slots(self, names: NameBlock, command: bytes) -> list[tuple[Sequence[int], Reply]]:
        """One multi-key `command` (`MGET`, `EXISTS`) per slot: each slot's pages (indices
        into `names`, in batch order) with its one reply, kept as `run` keeps them. A lookup
        of a chain's pages is a few slots: no Python work per page."""
        return [
            (slot, reply)
            for slots, got in self._retried(
                names, lambda groups: names.commands(command, groups), by_slot=True
            )
            for slot, reply in zip(slots, got, strict=True)
        ]

    def _retried(
        self, names: NameBlock, pack: Callable[[Any], Sequence[bytes | memoryview]], by_slot: bool
    ) -> Iterator[tuple[Sequence[Any], list[Reply]]]:
        """Each master's units (its pages, or with `by_slot` its slots' lists of pages) with
        their replies (`pack` packs a master's units: a `Packer`, or with `by_slot` one
        command per slot); what was redirected or lost on the way is sent again, once, after a
        refresh of the slot map. Raises a master's failure not worth a retry, any failure of
        the retry, and a `ClusterDownError` still answered after it."""
        todo = list(range(len(names)))
        for attempt in range(2):
            retry: list[int] = []
            for units, outcome in self._send(names, todo, pack, by_slot) if todo else ():
                if isinstance(outcome, BaseException):
                    if attempt or not isinstance(outcome, NODE_LOST):
                        raise outcome
                    retry += chain.from_iterable(units) if by_slot else units
                elif not any(map(isinstance, outcome, repeat(_STALE_MAP))):
                    yield units, outcome  # the usual case
                elif attempt:
                    down = [r for r in outcome if isinstance(r, ClusterDownError)]
                    if down:
                        raise down[0]
                    yield units, outcome  # still redirected: the caller's miss
                else:
                    stale = [isinstance(reply, _STALE_MAP) for reply in outcome]
                    for unit, moved in zip(units, stale, strict=True):
                        if moved:
                            retry += unit if by_slot else [unit]
                    yield (
                        [u for u, moved in zip(units, stale, strict=True) if not moved],
                        [r for r, moved in zip(outcome, stale, strict=True) if not moved],
                    )
            if not retry:
                return
            self.refresh()
            todo = sorted(retry)

    def refresh(self) -> None:
        """Reads the slot map again from a reachable node (raises when none answers)."""
        self.refreshes += 1
        self.client.nodes_manager.initialize()

    def _send(
        self,
        names: NameBlock,
        todo: list[int],
        pack: Callable[[Any], Sequence[bytes | memoryview]],
        by_slot: bool,
    ) -> list[tuple[Sequence[Any], list[Reply] | BaseException]]:
        """Each master's units (its pages, or with `by_slot` its slots' lists of pages, one
        command per slot) with a reply per unit, or the failure of that master's pipeline:
        every master's commands go out, then the replies are read (a master's commands sent
        as one buffer in slot mode: they are small)."""
        groups = self._by_master(names, todo, by_slot)
        sent: list[Sent | BaseException] = []
        for node, slots in groups:
            try:
                chunks = pack(slots if by_slot else slots[0])
                sent.append(send(self.client.get_redis_connection(node), chunks))
            except (RedisError, OSError) as exc:  # the caller decides: retry, or fail
                sent.append(exc)
        out: list[tuple[Sequence[Any], list[Reply] | BaseException]] = []
        for (_, slots), pending in zip(groups, sent, strict=True):
            units: Sequence[Any] = slots if by_slot else slots[0]
            if isinstance(pending, BaseException):
                out.append((units, pending))
                continue
            try:
                out.append((units, receive(pending, len(units))))
            except (RedisError, OSError) as exc:
                out.append((units, exc))
        return out

    def one_slot_master(self, names: Sequence[str]) -> redis.Redis | None:
        """The client of the master holding the batch when every name ends in one hash tag
        (a lookup of one group of a chain's pages): its one command needs none of a batch's
        grouping. None otherwise, or when the slot has no master in the map."""
        tag = shared_tag(names)
        if tag is None:
            return None
        _, masters, owner_list = self._current_table()
        master = owner_list[tag_slot(tag)]
        return None if master < 0 else self.client.get_redis_connection(masters[master])

    def _by_master(
        self, names: NameBlock, todo: list[int], by_slot: bool
    ) -> list[tuple[ClusterNode, list[Sequence[int]]]]:
        """Each master with its pages (indices into `names`, in batch order): one list, or
        with `by_slot` one list per slot."""
        owner, masters, owner_list = self._current_table()
        whole = len(todo) == len(names)
        picked = names if whole else names.subset(todo)
        groups = group_by_master(owner, owner_list, picked, by_slot)
        if whole:
            return [(masters[m], lists) for m, lists in groups]
        return [(masters[m], [[todo[i] for i in g] for g in lists]) for m, lists in groups]

    def _current_table(self) -> tuple[np.ndarray, list[ClusterNode], list[int]]:
        """slot -> index of its master (-1: none), as an array and as a list, and the masters,
        from the client's slot map (rebuilt when a refresh replaced the map)."""
        slots = self.client.nodes_manager.slots_cache
        built, owner, masters, owner_list = self._table
        if slots is not built:  # a new map (a refresh): a new table
            by_name = {nodes[0].name: nodes[0] for nodes in slots.values() if nodes}
            masters = list(by_name.values())
            position = {name: i for i, name in enumerate(by_name)}
            owner_list = [position[slots[s][0].name] if slots.get(s) else -1 for s in range(SLOTS)]
            owner = np.array(owner_list, dtype=np.int64)
            self._table = (slots, owner, masters, owner_list)
        return owner, masters, owner_list
