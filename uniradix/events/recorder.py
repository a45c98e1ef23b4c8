"""EventRecorder: the cache's event sink. It records what the cache executed (a new leaf's
full KV stored, a leaf's full KV removed, a reset; with a host tier also revival, load-back,
demotion, host backup and host eviction, each on its medium) and, once per scheduler step,
turns it into coalesced `BlockStored` / `BlockRemoved` / `AllBlocksCleared` events.

A cache operation pays only for appending a record (a tuple); hashing and every per-page
object wait for `take_events()`. Page digests come from the cache's `NodeDigests` (shared
with L3 storage keys): each page is hashed once while its node lives, a split keeps them,
and a remove reads them back instead of hashing again. Per step, in execution order::

    store(node)   -> BlockStored(hashes of node's pages, parent = parent's last hash)
    remove(node)  -> BlockRemoved(node's hashes, deepest first)
    reset()       -> AllBlocksCleared (what came before it in the step is dropped)

Consecutive stores that chain (same medium and namespace) and consecutive removes of one
medium are merged into one event, as SGLang does; a merged run's hashes and tokens are
converted to Python ints in one numpy pass each.

A store and a remove of the same pages within one step are both sent, as vLLM and SGLang
do: cancelling them is only sound when no other store of the step chains from those pages
(a host store of a child, say), and a router applying both ends where it started.

EAGLE (bigram) caches publish SGLang's bigram chain (both tokens of each pair hashed, what
the SGLang router computes for EAGLE workers) with each page's original token ids: a page
of N bigram units `(t[i], t[i+1])` carries `t[i]`, N tokens, so `len(token_ids) ==
len(block_hashes) * block_size` holds as llm-d and Dynamo need (SGLang sends the pairs,
which llm-d and SGLang's own typed decoder cannot read: sglang#39610).
"""

from __future__ import annotations

import numpy as np

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.event_sink import MEDIA, MEDIUM_CPU_PINNED, MEDIUM_DISK, MEDIUM_GPU
from uniradix.events.hashing import block_hashing
from uniradix.events.types import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from uniradix.node_digests import NodeDigests
from uniradix.page_hash import DIGEST_BYTES
from uniradix.tree.node import TreeNode

_BIT = {m: 1 << i for i, m in enumerate(MEDIA)}


def holds(node: TreeNode, medium: str) -> bool:
    """Whether `node`'s full KV is on `medium` as announced: device slots (a load-back's as
    soon as submitted), a host copy once its backup was acked."""
    d = node.data[0]
    if medium == MEDIUM_GPU:
        return d.value is not None
    if medium == MEDIUM_CPU_PINNED:
        return d.host_value is not None and "write" not in (d.metadata or {})
    return False


class _Store:
    """A recorded store: `node`'s pages below `parent` (as they were when recorded: splits
    since then may have cut them into several nodes) entered `medium`. Resolved (digests,
    units, prior digest) at the flush, or at the node's remove if that comes first."""

    __slots__ = ("blob", "lora_name", "medium", "node", "parent", "prior", "units")

    def __init__(self, node: TreeNode, medium: str) -> None:
        self.node = node
        self.parent = node.parent
        self.lora_name = node.extra_key
        self.medium = medium
        self.blob: bytes | None = None
        self.units = b""
        self.prior: bytes | None = None


class _Run:
    """Records merged into one event: digests and units joined once at the end."""

    __slots__ = ("blobs", "last", "lora_name", "medium", "parent_hash", "removed", "units")

    def __init__(self, medium: str, removed: bool, lora_name: str | None = None) -> None:
        self.medium = medium
        self.removed = removed
        self.lora_name = lora_name
        self.blobs: list[bytes] = []
        self.units: list[bytes] = []
        self.parent_hash: int | None = None
        self.last: bytes | None = None  # the run's last digest (stores)


class EventRecorder:
    """A `CacheEventSink` for one cache. `group_idx` / `kv_cache_spec_kind` describe the
    published (full-attention) group in map events; `cache_salt` seeds every chain;
    `hash_algo` (`uniradix.events.hashing.HASH_ALGOS`) picks the block hash, `hash_seed` is
    vLLM's `PYTHONHASHSEED` for `vllm_sha256_cbor`."""

    def __init__(
        self,
        cache: UnifiedRadixCache,
        cache_salt: str | None = None,
        group_idx: int | None = 0,
        kv_cache_spec_kind: str | None = "full_attention",
        hash_algo: str = "sglang_sha256",
        hash_seed: str | None = None,
    ) -> None:
        self.cache = cache
        self.block_size = cache.page_size
        self.cache_salt = cache_salt or None
        self._bigram = cache.settings.is_eagle
        self.hashing = block_hashing(hash_algo, cache_salt, hash_seed, self._bigram)
        self._seed, self._hasher = self.hashing.seed, self.hashing.hasher
        self.digests = NodeDigests.of_tree(cache.tree, self._bigram)
        self._group_idx = group_idx
        self._kind = kv_cache_spec_kind
        self._media: dict[TreeNode, int] = {}  # announced media of each known node (bits)
        # In execution order: a store, a remove (its digests, deepest page last, and medium),
        # or None for a clear.
        self._records: list[_Store | tuple[bytes, str] | None] = []
        self._pending: dict[TreeNode, list[_Store]] = {}  # unresolved stores per node

    # ------------------------------------------------------------------ sink
    def on_stored(self, node: TreeNode, medium: str) -> None:
        bit = _BIT[medium]
        media = self._media.get(node)
        if media is not None:
            # Known KV on a further medium (revival, load-back, host backup): same hashes.
            if medium != MEDIUM_DISK:  # L3 copies outlive the tree: not tracked (README, L3)
                self._media[node] = media | bit
            self._record(node, medium)
            return
        # A component may have split the new leaf before the cache reports it (SWA keeps one
        # window per node): the split-off parents are new too, and are stored first.
        fresh = [node]
        parent = node.parent
        while parent is not None and parent.num_tokens and parent not in self._media:
            fresh.append(parent)
            parent = parent.parent
        for n in reversed(fresh):
            self._media[n] = bit
            self._record(n, medium)

    def _record(self, node: TreeNode, medium: str) -> None:
        record = _Store(node, medium)
        self._records.append(record)
        pending = self._pending.get(node)
        if pending is None:
            self._pending[node] = [record]
        else:
            pending.append(record)

    def on_removed(self, node: TreeNode, medium: str) -> None:
        known = self._media.get(node)
        if known is None or not known & _BIT[medium]:
            return  # never announced there (cached before the recorder came): nothing to undo
        pending = self._pending.pop(node, None)
        if pending is not None:  # stored in this step: resolve while the node is attached
            for record in pending:
                self._resolve(record)
        blob = self.digests.node(node, self._seed, self._hasher)
        media = known & ~_BIT[medium]
        if media:
            self._media[node] = media
        else:
            del self._media[node]
            self.digests.forget(node)
        self._records.append((blob, medium))

    def on_cleared(self) -> None:
        self._records = [None]
        self._pending.clear()
        self._media.clear()
        self.digests.clear()

    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        # Digests follow the split in `NodeDigests`; pending stores keep their span.
        media = self._media.get(child)
        if media is not None:
            self._media[parent] = media

    # ------------------------------------------------------------------ hashing
    def _resolve(self, record: _Store) -> bytes:
        if record.blob is None:
            parent = record.parent
            assert parent is not None
            span = self.digests.span(record.node, parent, self._seed, self._hasher)
            record.prior = self.digests.last(parent, self._seed, self._hasher)
            record.blob = span
            n, pieces = record.node, []
            while n is not parent:
                pieces.append(n.key)
                n = n.parent  # type: ignore[assignment]
            record.units = pieces[0] if len(pieces) == 1 else b"".join(reversed(pieces))
        return record.blob

    def hashes(self, node: TreeNode) -> list[int]:
        """Published hashes of `node`'s pages (root side first)."""
        values: list[int] = self.hashing.published(
            self.digests.node(node, self._seed, self._hasher)
        ).tolist()
        return values

    # ------------------------------------------------------------------ events
    def take_events(self) -> list[KVEvent]:
        """The step's events, coalesced, in execution order; empties the record."""
        records, self._records = self._records, []
        self._pending.clear()
        cleared = False
        runs: list[_Run] = []
        for record in records:
            if record is None:
                cleared, runs = True, []
            elif isinstance(record, _Store):
                self._add_store(runs, record)
            else:
                blob, medium = record
                tail = runs[-1] if runs else None
                if tail is None or not tail.removed or tail.medium != medium:
                    tail = _Run(medium, True)
                    runs.append(tail)
                tail.blobs.append(blob)
        events: list[KVEvent] = [AllBlocksCleared()] if cleared else []
        events.extend(self._event(run) for run in runs)
        return events

    def _add_store(self, runs: list[_Run], record: _Store) -> None:
        blob = self._resolve(record)
        prior = record.prior
        root = record.parent is not None and not record.parent.num_tokens
        tail = runs[-1] if runs else None
        if (
            tail is None
            or tail.removed
            or tail.medium != record.medium
            or tail.lora_name != record.lora_name
            or root
            or tail.last != prior
        ):
            tail = _Run(record.medium, False, record.lora_name)
            if not root and prior is not None:
                tail.parent_hash = int(self.hashing.published(prior)[0])
            runs.append(tail)
        tail.blobs.append(blob)
        tail.units.append(record.units)
        tail.last = blob[-DIGEST_BYTES:]

    def _event(self, run: _Run) -> KVEvent:
        published = self.hashing.published
        if run.removed:
            hashes = [published(b)[::-1] for b in run.blobs]
            ints: list[int] = (hashes[0] if len(hashes) == 1 else np.concatenate(hashes)).tolist()
            return BlockRemoved(ints, run.medium, group_idx=self._group_idx)
        blob = run.blobs[0] if len(run.blobs) == 1 else b"".join(run.blobs)
        units = run.units[0] if len(run.units) == 1 else b"".join(run.units)
        return self._stored(
            published(blob).tolist(), run.parent_hash, units, run.medium, run.lora_name
        )

    def _tokens(self, units: bytes) -> list[int]:
        values = np.frombuffer(units, dtype="<i8")
        if self._bigram:  # a bigram unit (a, b) is `a << 32 | b`: its page's token is `a`
            values = values >> 32
        tokens: list[int] = values.tolist()
        return tokens

    def _stored(
        self,
        hashes: list[int],
        parent_hash: int | None,
        units: bytes,
        medium: str,
        lora_name: str | None,
    ) -> BlockStored:
        return BlockStored(
            hashes,
            parent_hash,
            self._tokens(units),
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
        published = self.hashing.published
        for node in self.cache.tree.nodes():
            if not holds(node, medium):
                continue
            self._media[node] = self._media.get(node, 0) | _BIT[medium]
            blob = self.digests.node(node, self._seed, self._hasher)
            parent = node.parent
            assert parent is not None
            parent_hash = None
            if parent.num_tokens:
                parent_hash = int(
                    published(self.digests.last(parent, self._seed, self._hasher) or b"")[0]
                )
            hashes: list[int] = published(blob).tolist()
            events.append(self._stored(hashes, parent_hash, node.key, medium, node.extra_key))
        return events
