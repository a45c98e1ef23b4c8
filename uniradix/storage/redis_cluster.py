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
from collections.abc import Callable, Sequence
from itertools import chain

import numpy as np
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    RedisError,
    TryAgainError,
)

from uniradix.storage.redis_slots import SLOTS, group_by_master, key_slot
from uniradix.storage.redis_wire import Reply, Sent, receive, send

__all__ = ["REDIRECTED", "ClusterBatches", "Packer", "Spread", "key_slot"]

Packer = Callable[[Sequence[int]], Sequence[bytes | memoryview]]
"""Packs the commands for the pages at these indices of the batch, in that order."""
Spread = Callable[[Reply, int], list[Reply]]
"""The replies of a slot's `num_pages` pages, from its one reply (`ClusterBatches.run`)."""

REDIRECTED = (AskError, TryAgainError)  # `MovedError` is an `AskError`
"""Replies meaning "not on this master now": a miss once the retry is spent."""
_STALE_MAP = (*REDIRECTED, ClusterDownError)
# A master that refused or dropped the connection (killed, restarted, replaced): the map may
# be stale, worth one refresh. A timeout is not retried: a master that stopped answering
# would cost its timeout again.
_NODE_LOST = (redis.exceptions.ConnectionError, OSError)


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

    def run(
        self, names: Sequence[bytes], pack: Packer, spread: Spread | None = None
    ) -> list[Reply]:
        """One reply per name, in order (see `redis_wire.Reply`); a reply that is still a
        redirection after the one retry is left as it is (`REDIRECTED`): the caller's miss.
        Raises the store failure when a master stays unreachable or the cluster stays down.
        With `spread`, `pack` makes one command for the pages of one slot (a multi-key
        command), whose one reply `spread` turns into the pages' replies (an error reply:
        each page's)."""
        replies: list[Reply] = [None] * len(names)
        if not names:
            return replies
        todo = list(range(len(names)))
        errors = False  # any error reply kept
        for attempt in range(2):
            retry: list[int] = []
            for indices, outcome, has_error in self._send(names, todo, pack, spread):
                if isinstance(outcome, BaseException):
                    if attempt or not isinstance(outcome, _NODE_LOST):
                        raise outcome
                    retry.extend(indices)
                    continue
                if not has_error:  # the usual case: every reply kept, no Python per page
                    if len(indices) == len(names):  # the batch on one master
                        replies = outcome
                    else:
                        deque(map(replies.__setitem__, indices, outcome), maxlen=0)
                    continue
                errors = True
                for i, reply in zip(indices, outcome, strict=True):
                    if attempt == 0 and isinstance(reply, _STALE_MAP):
                        retry.append(i)
                    else:
                        replies[i] = reply
            if not retry:
                break
            self.refresh()
            todo = sorted(retry)
        for reply in replies if errors else ():
            if isinstance(reply, ClusterDownError):
                raise reply
        return replies

    def refresh(self) -> None:
        """Reads the slot map again from a reachable node (raises when none answers)."""
        self.refreshes += 1
        self.client.nodes_manager.initialize()

    def _send(
        self, names: Sequence[bytes], todo: list[int], pack: Packer, spread: Spread | None
    ) -> list[tuple[Sequence[int], list[Reply] | BaseException, bool]]:
        """Each master's pages (indices into `names`), their replies and whether one is an
        error reply, or the failure of that master's pipeline: every master's commands go
        out, then the replies are read. With `spread`, a master's pages come slot by slot,
        one command per slot (a master's commands sent as one buffer: they are small)."""
        groups = self._by_master(names, todo, by_slot=spread is not None)
        sent: list[Sent | BaseException] = []
        for node, slots in groups:
            try:
                if spread is None:
                    chunks = pack(slots[0])
                else:
                    chunks = [b"".join([c for idx in slots for c in pack(idx)])]
                sent.append(send(self.client.get_redis_connection(node), chunks))
            except (RedisError, OSError) as exc:  # the caller decides: retry, or fail
                sent.append(exc)
        out: list[tuple[Sequence[int], list[Reply] | BaseException, bool]] = []
        for (_, slots), pending in zip(groups, sent, strict=True):
            indices = slots[0] if len(slots) == 1 else list(chain.from_iterable(slots))
            if isinstance(pending, BaseException):
                out.append((indices, pending, True))
                continue
            try:
                got = receive(pending, len(slots) if spread else len(indices))
            except (RedisError, OSError) as exc:
                out.append((indices, exc, True))
                continue
            has_error = any(isinstance(reply, Exception) for reply in got)
            if spread is None:
                out.append((indices, got, has_error))
                continue
            replies: list[Reply] = []
            for idx, reply in zip(slots, got, strict=True):
                if isinstance(reply, Exception):
                    replies += [reply] * len(idx)
                else:
                    replies += spread(reply, len(idx))
            out.append((indices, replies, has_error))
        return out

    def _by_master(
        self, names: Sequence[bytes], todo: list[int], by_slot: bool
    ) -> list[tuple[ClusterNode, list[Sequence[int]]]]:
        """Each master with its pages (indices into `names`, in batch order): one list, or
        with `by_slot` one list per slot."""
        slots = self.client.nodes_manager.slots_cache
        built, owner, masters, owner_list = self._table
        if slots is not built:  # a new map (a refresh): a new table
            by_name = {nodes[0].name: nodes[0] for nodes in slots.values() if nodes}
            masters = list(by_name.values())
            position = {name: i for i, name in enumerate(by_name)}
            owner_list = [position[slots[s][0].name] if slots.get(s) else -1 for s in range(SLOTS)]
            owner = np.array(owner_list, dtype=np.int64)
            self._table = (slots, owner, masters, owner_list)
        whole = len(todo) == len(names)
        picked = names if whole else [names[i] for i in todo]
        groups = group_by_master(owner, owner_list, picked, by_slot)
        if whole:
            return [(masters[m], lists) for m, lists in groups]
        return [(masters[m], [[todo[i] for i in g] for g in lists]) for m, lists in groups]
