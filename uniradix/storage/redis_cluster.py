"""A batch of per-key commands on a Redis Cluster at the speed of one Redis.

redis-py's cluster pipeline builds Python objects per command and visits the masters one
after another (a round trip each): on the replay's batches a 3-master local cluster took
~5x the wall of one Redis. Here a batch is grouped by hash slot into the masters holding
the slots (a table of redis-py's slot map), each master gets one hand-packed pipeline
(`redis_wire`) on its own connection, and every master's commands are sent before any
reply is read, so the masters work at the same time while one thread sends and reads the
same bytes as it would with one Redis (no thread hand-offs: they cost more than they saved
on small batches).

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

from binascii import crc_hqx
from collections.abc import Callable, Sequence

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    RedisError,
    SlotNotCoveredError,
    TryAgainError,
)

from uniradix.storage.redis_wire import Reply, Sent, receive, send

Packer = Callable[[list[int]], Sequence[bytes | memoryview]]
"""Packs the commands for the pages at these indices of the batch, in that order."""
Spread = Callable[[Reply, int], list[Reply]]
"""The replies of a master's `num_pages` pages, from its one reply (`ClusterBatches.run`)."""

REDIRECTED = (AskError, TryAgainError)  # `MovedError` is an `AskError`
"""Replies meaning "not on this master now": a miss once the retry is spent."""
_STALE_MAP = (*REDIRECTED, ClusterDownError)
# A master that refused or dropped the connection (killed, restarted, replaced): the map may
# be stale, worth one refresh. A timeout is not retried: a master that stopped answering
# would cost its timeout again.
_NODE_LOST = (redis.exceptions.ConnectionError, OSError)
_SLOTS = 16384


def key_slot(name: bytes) -> int:
    """A key's cluster slot: CRC16 of the key, or of its {hash tag} when it has one."""
    start = name.find(b"{")
    if start >= 0:
        end = name.find(b"}", start + 1)
        if end > start + 1:
            name = name[start + 1 : end]
    return crc_hqx(name, 0) % _SLOTS


class ClusterBatches:
    """Runs batches of single-key commands (one per page) on a cluster's masters. Thread-safe:
    each call uses its own connections."""

    def __init__(self, client: RedisCluster) -> None:
        self.client = client
        self.refreshes = 0  # slot map refreshes after a redirection or a lost master
        # The slot map's dict, and built from it: slot -> index of its master (-1: none),
        # and the masters. One tuple, replaced whole: threads read it without a lock.
        self._table: tuple[object, list[int], list[ClusterNode]] = (None, [], [])

    def run(
        self, names: Sequence[bytes], pack: Packer, spread: Spread | None = None
    ) -> list[Reply]:
        """One reply per name, in order (see `redis_wire.Reply`); a reply that is still a
        redirection after the one retry is left as it is (`REDIRECTED`): the caller's miss.
        Raises the store failure when a master stays unreachable or the cluster stays down.
        With `spread`, `pack` makes one command per master (a script over its pages), whose
        one reply `spread` turns into the pages' replies (an error reply: each page's)."""
        replies: list[Reply] = [None] * len(names)
        if not names:
            return replies
        todo = list(range(len(names)))
        for attempt in range(2):
            retry: list[int] = []
            for indices, outcome in self._send(names, todo, pack, spread):
                if isinstance(outcome, BaseException):
                    if attempt or not isinstance(outcome, _NODE_LOST):
                        raise outcome
                    retry.extend(indices)
                    continue
                for i, reply in zip(indices, outcome, strict=True):
                    if attempt == 0 and isinstance(reply, _STALE_MAP):
                        retry.append(i)
                    else:
                        replies[i] = reply
            if not retry:
                break
            self.refresh()
            todo = sorted(retry)
        for reply in replies:
            if isinstance(reply, ClusterDownError):
                raise reply
        return replies

    def refresh(self) -> None:
        """Reads the slot map again from a reachable node (raises when none answers)."""
        self.refreshes += 1
        self.client.nodes_manager.initialize()

    def _send(
        self, names: Sequence[bytes], todo: list[int], pack: Packer, spread: Spread | None
    ) -> list[tuple[list[int], list[Reply] | BaseException]]:
        """Each master's pages (indices into `names`) and their replies, or the failure of
        that master's pipeline: every master's commands go out, then the replies are read."""
        groups = self._by_master(names, todo)
        sent: list[Sent | BaseException] = []
        for node, indices in groups:
            try:
                sent.append(send(self.client.get_redis_connection(node), pack(indices)))
            except (RedisError, OSError) as exc:  # the caller decides: retry, or fail
                sent.append(exc)
        out: list[tuple[list[int], list[Reply] | BaseException]] = []
        for (_, indices), pending in zip(groups, sent, strict=True):
            if isinstance(pending, BaseException):
                out.append((indices, pending))
                continue
            try:
                got = receive(pending, 1 if spread else len(indices))
            except (RedisError, OSError) as exc:
                out.append((indices, exc))
                continue
            if spread is None:
                out.append((indices, got))
            elif isinstance(got[0], Exception):
                out.append((indices, [got[0]] * len(indices)))
            else:
                out.append((indices, spread(got[0], len(indices))))
        return out

    def _by_master(
        self, names: Sequence[bytes], todo: list[int]
    ) -> list[tuple[ClusterNode, list[int]]]:
        slots = self.client.nodes_manager.slots_cache
        built, owner, masters = self._table
        if slots is not built:  # a new map (a refresh): a new table
            by_name = {nodes[0].name: nodes[0] for nodes in slots.values() if nodes}
            masters = list(by_name.values())
            position = {name: i for i, name in enumerate(by_name)}
            owner = [position[slots[s][0].name] if slots.get(s) else -1 for s in range(_SLOTS)]
            self._table = (slots, owner, masters)
        picked = names if len(todo) == len(names) else [names[i] for i in todo]
        # Comprehensions, not a loop: this runs for every page of every batch.
        if b"{" in b"".join(picked):
            owners = [owner[key_slot(name)] for name in picked]
        else:
            owners = [owner[crc_hqx(name, 0) % _SLOTS] for name in picked]
        if -1 in owners:
            name = picked[owners.index(-1)]
            raise SlotNotCoveredError(f"slot {key_slot(name)} of {name!r} has no master")
        # Grouped by a stable sort (C code; each master's pages stay in batch order), split
        # at each master's count.
        order = sorted(range(len(todo)), key=owners.__getitem__)
        groups, start = [], 0
        for m in range(len(masters)):
            end = start + owners.count(m)
            groups.append([todo[i] for i in order[start:end]] if end > start else [])
            start = end
        return [(masters[m], idx) for m, idx in enumerate(groups) if idx]
