"""EventRecorder: the cache's event sink. It records what the cache executed (a new leaf's
full KV stored, a leaf's full KV removed, a reset; with a host tier also revival, load-back,
demotion, host backup and host eviction, each on its medium) and, once per scheduler step,
turns it into coalesced `BlockStored` / `BlockRemoved` / `AllBlocksCleared` events.

Hashing is deferred to `take_events()`, so a cache operation pays only for appending a
record. Each stored node's page digests live in a side table owned here (never in the tree):
a chain continues from the parent's last digest, a split hands the first pages to the new
parent (forcing the hash of a still-pending store first), so a split changes no hash and
emits nothing. Per step, in execution order::

    store(node)   -> BlockStored(hashes of node's pages, parent = parent's last hash)
    remove(node)  -> BlockRemoved(node's hashes, deepest first)
    reset()       -> AllBlocksCleared (what came before it in the step is dropped)

Consecutive stores that chain (same medium and namespace) and consecutive removes of one
medium are merged into one event, as SGLang does.
"""

from __future__ import annotations

import numpy as np

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.event_sink import MEDIA, MEDIUM_CPU_PINNED, MEDIUM_DISK, MEDIUM_GPU
from uniradix.events.types import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from uniradix.page_hash import digest_to_int64, page_digests, salt_seed
from uniradix.tree.node import TreeNode


def _int64s(digests: list[bytes]) -> list[int]:
    """`digest_to_int64` of each digest, in one numpy pass (flushes convert many)."""
    values: list[int] = np.frombuffer(b"".join(d[:8] for d in digests), dtype=">i8").tolist()
    return values


def holds(node: TreeNode, medium: str) -> bool:
    """Whether `node`'s full KV is on `medium` as announced: device slots (a load-back's as
    soon as submitted), a host copy once its backup was acked."""
    d = node.data[0]
    if medium == MEDIUM_GPU:
        return d.value is not None
    if medium == MEDIUM_CPU_PINNED:
        return d.host_value is not None and "write" not in (d.metadata or {})
    return False


class _Pages:
    """A node's page digests (root side first) and the media holding them."""

    __slots__ = ("digests", "media")

    def __init__(self, digests: list[bytes], media: set[str]) -> None:
        self.digests = digests
        self.media = media


class _Store:
    __slots__ = ("digests", "key", "lora_name", "medium", "node", "parent", "parent_hash")

    def __init__(self, node: TreeNode, medium: str) -> None:
        self.node = node
        self.parent = node.parent
        self.key = node.key  # the edge as stored: a later split makes new bytes objects
        self.lora_name = node.extra_key
        self.medium = medium
        self.digests: list[bytes] | None = None
        self.parent_hash: int | None = None


class EventRecorder:
    """A `CacheEventSink` for one cache. `group_idx` / `kv_cache_spec_kind` describe the
    published (full-attention) group in map events; `cache_salt` seeds every chain."""

    def __init__(
        self,
        cache: UnifiedRadixCache,
        cache_salt: str | None = None,
        group_idx: int | None = 0,
        kv_cache_spec_kind: str | None = "full_attention",
    ) -> None:
        if cache.settings.is_eagle:
            raise ValueError("KV events for EAGLE bigram caches are not supported")
        self.cache = cache
        self.block_size = cache.page_size
        self.cache_salt = cache_salt or None
        self._seed = salt_seed(cache_salt)
        self._group_idx = group_idx
        self._kind = kv_cache_spec_kind
        self._pages: dict[TreeNode, _Pages] = {}
        # A remove carries its digests (deepest first): the node may be split after it.
        self._records: list[_Store | tuple[list[bytes], str] | None] = []  # None = cleared
        self._pending: dict[TreeNode, _Store] = {}

    # ------------------------------------------------------------------ sink
    def on_stored(self, node: TreeNode, medium: str) -> None:
        if node in self._pages or node in self._pending:
            # Known KV on a further medium (revival, load-back, host backup): same hashes.
            self._records.append(self._again(node, medium))
            if medium != MEDIUM_DISK:  # L3 copies outlive the tree: not tracked (README, L3)
                self._pages[node].media.add(medium)
            return
        # A component may have split the new leaf before the cache reports it (SWA keeps one
        # window per node): the split-off parents are new too, and are stored first.
        fresh = [node]
        parent = node.parent
        while (
            parent is not None
            and parent.num_tokens
            and parent not in self._pages
            and parent not in self._pending
        ):
            fresh.append(parent)
            parent = parent.parent
        for n in reversed(fresh):
            record = _Store(n, medium)
            self._records.append(record)
            self._pending[n] = record

    def _again(self, node: TreeNode, medium: str) -> _Store:
        record = _Store(node, medium)
        record.digests = list(self._known(node))
        prior = self._last_digest(node.parent)
        if prior is not None and prior is not self._seed:
            record.parent_hash = digest_to_int64(prior)
        return record

    def _known(self, node: TreeNode) -> list[bytes]:
        record = self._pending.get(node)
        return self._pages[node].digests if record is None else self._resolve(record)

    def on_removed(self, node: TreeNode, medium: str) -> None:
        digests = self._known(node)
        pages = self._pages[node]
        pages.media.discard(medium)
        if not pages.media:
            del self._pages[node]
        self._records.append((digests[::-1], medium))

    def on_cleared(self) -> None:
        self._records = [None]
        self._pending.clear()
        self._pages.clear()

    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        record = self._pending.get(child)
        if record is not None:
            self._resolve(record)
        pages = self._pages.get(child)
        if pages is not None:
            k = split_len // self.block_size
            self._pages[parent] = _Pages(pages.digests[:k], set(pages.media))
            pages.digests = pages.digests[k:]

    # ------------------------------------------------------------------ hashing
    def _last_digest(self, node: TreeNode | None) -> bytes | None:
        if node is None or node.num_tokens == 0:  # the root: the chain starts at the seed
            return self._seed
        record = self._pending.get(node)
        if record is not None:
            self._resolve(record)
        return self._pages[node].digests[-1]

    def _resolve(self, record: _Store) -> list[bytes]:
        if record.digests is None:
            prior = self._last_digest(record.parent)
            if prior is not None and prior is not self._seed:
                record.parent_hash = digest_to_int64(prior)
            record.digests = page_digests(record.key, self.block_size, prior)
            self._pages[record.node] = _Pages(record.digests, {record.medium})
            del self._pending[record.node]
        return record.digests

    def hashes(self, node: TreeNode) -> list[int]:
        """Published hashes of `node`'s pages (root side first); `node` must be stored."""
        record = self._pending.get(node)
        if record is not None:
            self._resolve(record)
        return [digest_to_int64(d) for d in self._pages[node].digests]

    # ------------------------------------------------------------------ events
    def take_events(self) -> list[KVEvent]:
        """The step's events, coalesced, in execution order; empties the record."""
        records, self._records = self._records, []
        events: list[KVEvent] = []
        for record in records:
            if record is None:
                events = [AllBlocksCleared()]
            elif isinstance(record, _Store):
                digests = self._resolve(record)
                hashes = _int64s(digests)
                tokens = np.frombuffer(record.key, dtype="<i8").tolist()
                self._add_store(events, hashes, record.parent_hash, tokens, record)
            else:
                deepest_first, medium = record
                hashes = _int64s(deepest_first)
                tail = events[-1] if events else None
                if isinstance(tail, BlockRemoved) and tail.medium == medium:
                    tail.block_hashes.extend(hashes)
                else:
                    events.append(BlockRemoved(hashes, medium, group_idx=self._group_idx))
        return events

    def _add_store(
        self,
        events: list[KVEvent],
        hashes: list[int],
        parent_hash: int | None,
        tokens: list[int],
        record: _Store,
    ) -> None:
        tail = events[-1] if events else None
        if (
            isinstance(tail, BlockStored)
            and tail.medium == record.medium
            and tail.lora_name == record.lora_name
            and parent_hash is not None
            and tail.block_hashes[-1] == parent_hash
        ):
            tail.block_hashes.extend(hashes)
            tail.token_ids.extend(tokens)
            return
        events.append(self._stored(hashes, parent_hash, tokens, record.medium, record.lora_name))

    def _stored(
        self,
        hashes: list[int],
        parent_hash: int | None,
        tokens: list[int],
        medium: str,
        lora_name: str | None,
    ) -> BlockStored:
        return BlockStored(
            hashes,
            parent_hash,
            tokens,
            self.block_size,
            None,
            medium,
            lora_name,
            cache_salt=self.cache_salt,
            group_idx=self._group_idx,
            kv_cache_spec_kind=self._kind,
        )

    def snapshot(self, medium: str = MEDIUM_GPU) -> list[KVEvent]:
        """`BlockStored` events for every node the cache holds on `medium`, parents first:
        what a subscriber needs after `AllBlocksCleared` to know the whole content again.
        Hashes nodes stored before the recorder was attached. Call after `take_events()`."""
        if medium not in MEDIA:
            raise ValueError(f"unknown medium {medium!r}; choose from {MEDIA}")
        events: list[KVEvent] = []
        for node in self.cache.tree.nodes():
            if not holds(node, medium):
                continue
            pages = self._pages.get(node)
            prior = self._last_digest(node.parent)
            if pages is None:
                pages = _Pages(page_digests(node.key, self.block_size, prior), set())
                self._pages[node] = pages
            pages.media.add(medium)
            parent_hash = None if prior is None or prior is self._seed else digest_to_int64(prior)
            hashes = [digest_to_int64(d) for d in pages.digests]
            tokens = np.frombuffer(node.key, dtype="<i8").tolist()
            events.append(self._stored(hashes, parent_hash, tokens, medium, node.extra_key))
        return events
