"""StorageTier: wires the L3 store (`uniradix.storage`) under the L2 host tier (full attention).

**Backup** (write-through to L3): when a host backup of a node chain is acked
(`HostTier.writing_check`), the chain's pages are handed to a `BackupWriter` under keys from
their chained page digests (`KeySpace.keys_for` over the chain's whole path, so the chain is
rooted in its `extra_key` namespace). Only the contiguous stored prefix a writer result
reports counts as stored (`stats.stored_pages`).

**Payload.** This slice covers zero-layer (simulation) caches only: a page's payload is empty,
and the page header (fingerprint, digest, length, checksum) is what is stored and verified,
so a simulation exercises keys, existence probes, reads and hits with no tensor bytes.
A cache whose device pool has layers is refused (`ValueError`) until real host KV bytes
(`HostKVPool.page_bytes` / `set_page_bytes`) travel with the pages.

**Prefetch** (`prefetch(key)`, called by the scheduler at admission before its match): when
`key` extends at least `prefetch_threshold` tokens past the device+host hit, probe the store
(`batch_exists`), reserve host slots for the stored pages (never more than half the host
pool in flight), read them, and insert the arrived prefix as one host-only node under the
deepest matched node; the normal load-back then serves it. The read is synchronous in the
caller's thread (the `wait_complete` policy, bounded by the backend's timeouts and circuit
breaker); the background `Prefetcher` and the `best_effort` / `timeout` policies are not
wired yet. Slots reserved for pages that did not arrive are freed at once, so no failure
path (store down, short read, corrupt page: all misses) leaks a host slot.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Protocol

from uniradix.event_sink import MEDIUM_CPU_PINNED
from uniradix.key import UNIT_BYTES, RadixKey
from uniradix.node_digests import NodeDigests
from uniradix.page_hash import DIGEST_BYTES, namespace_seed
from uniradix.storage.backend import StorageBackend
from uniradix.storage.io import BackupWriter
from uniradix.storage.keys import KeySpace, PageKey
from uniradix.tiers.views import HostTierView
from uniradix.tree.node import TreeNode
from uniradix.types import MatchPrefixParams, Slots


class HostTierWithStorage(HostTierView, Protocol):
    """The host tier as its L3 wiring sees it: `storage` is where it hangs itself."""

    storage: StorageTier | None


DEFAULT_PREFETCH_THRESHOLD = 256
_EMPTY = b""


@dataclass
class StorageTierStats:
    """Pages and tokens moved between the host tier and L3 since the cache was built."""

    backup_pages_submitted: int = 0
    backup_pages_dropped: int = 0  # the writer's queue was full
    stored_pages: int = 0  # contiguous prefixes the writer reported stored
    prefetches: int = 0  # probes that found at least one page to fetch
    probed_pages: int = 0  # pages the probes found stored
    fetched_tokens: int = 0  # tokens inserted as host-only nodes from L3
    reserve_failed: int = 0  # probes with stored pages but no host room
    hit_tokens: int = 0  # fetched tokens a request then loaded back (set by the scheduler)

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class StorageTier:
    def __init__(
        self,
        tier: HostTierWithStorage,
        backend: StorageBackend,
        model_fingerprint: str,
        prefetch_threshold: int = DEFAULT_PREFETCH_THRESHOLD,
        cache_salt: str | None = None,
    ) -> None:
        kv_pool = tier.cache.pools.kv_pool
        if kv_pool is not None and kv_pool.num_layers:
            raise ValueError(
                f"L3 storage carries no tensor bytes yet: a cache with {kv_pool.num_layers} "
                "layers cannot use storage_url"
            )
        if not isinstance(prefetch_threshold, int) or prefetch_threshold < 1:
            raise ValueError(f"prefetch_threshold must be an int >= 1, got {prefetch_threshold!r}")
        self.tier = tier
        self.backend = backend
        self.page_size = tier.cache.page_size
        self.keyspace = KeySpace(model_fingerprint, "none", "sim", self.page_size, "full")
        self.digests = NodeDigests.of_tree(tier.cache.tree, tier.cache.settings.is_eagle)
        self.prefetch_threshold = prefetch_threshold
        self.cache_salt = cache_salt
        self.writer = BackupWriter(backend)
        # A full writer queue drops the chain (a server must not block); a replay sets this
        # to wait for the queue instead, so its figures show the store, not the queue bound.
        self.backpressure = False
        self.stats = StorageTierStats()
        tier.storage = self

    # ------------------------------------------------------------------ backup
    def backup(self, chain: list[TreeNode]) -> None:
        """Queues the pages of a freshly host-backed chain (any order; contiguous)."""
        if not chain:
            return
        deepest = max(chain, key=lambda n: self.tier.cache.tree.prefix_len(n))
        # The path's digests from the cache's shared table: hashed once per node, not per
        # backup (the event recorder reads the same ones when the namespace seeds agree).
        seed = namespace_seed(deepest.extra_key, self.cache_salt)
        path = self.digests.path(deepest, seed)
        keys = self.keyspace.keys(
            [path[a : a + DIGEST_BYTES] for a in range(0, len(path), DIGEST_BYTES)]
        )
        first = (len(keys) * self.page_size - sum(n.num_tokens for n in chain)) // self.page_size
        pages = keys[max(first, 0) :]
        if not pages:
            return
        payloads = [_EMPTY] * len(pages)
        ticket = self.writer.submit(pages, payloads)
        if ticket is None and self.backpressure:
            self.writer.flush()  # a replay has no clock to protect: wait rather than drop
            ticket = self.writer.submit(pages, payloads)
        if ticket is None:
            self.stats.backup_pages_dropped += len(pages)
        else:
            self.stats.backup_pages_submitted += len(pages)
        self.poll()

    def poll(self) -> None:
        for result in self.writer.poll():
            self.stats.stored_pages += result.stored_pages

    def flush(self) -> None:
        """Waits for every queued backup (replay end, tests)."""
        self.writer.flush()
        self.poll()

    # ------------------------------------------------------------------ prefetch
    def prefetch(self, key: RadixKey) -> int:
        """Fetches the stored pages of `key` past its device+host hit into the host tier as
        a host-only node; returns the tokens inserted (0 when nothing was worth fetching)."""
        cache, ps = self.tier.cache, self.page_size
        num_pages = len(key) // ps
        match = cache.match_prefix(MatchPrefixParams(key))
        hit = match.device_prefix_len + match.host_hit_length
        if num_pages * ps - hit < self.prefetch_threshold:
            return 0
        parent = match.best_match_node
        if parent is None or hit % ps:
            return 0
        keys = self.keyspace.keys_for(key, self.cache_salt)[hit // ps : num_pages]
        stored = self.backend.batch_exists(keys)
        if stored == 0:
            return 0
        self.stats.prefetches += 1
        self.stats.probed_pages += stored
        pool = self.tier.host_pools.full
        stored = min(stored, pool.capacity // 2 // ps)  # half the host pool at most
        # Lock the device part of the path and pin its host-only part, so making host room
        # for the fetch can evict neither the node the pages hang under nor its ancestors.
        device = match.last_device_node
        device_lock = None
        if device is not None and device is not cache.tree.root:
            device_lock = cache.inc_lock_ref(device)
        pinned = parent is not cache.tree.root and parent.data[0].value is None
        if pinned:
            self.tier.inc_host_lock_ref(parent)
        try:
            slots = self.tier.alloc_host(stored * ps) if stored else None
            if slots is None:
                self.stats.reserve_failed += 1
                return 0
            got = self._read(keys[:stored])
            if got < stored:
                pool.free(slots[got * ps :], node_value=True)
            if got == 0:
                return 0
            start = hit * UNIT_BYTES
            units = key.units[start : start + got * ps * UNIT_BYTES]
            self._insert_host(parent, units, key, slots[: got * ps])
            self.stats.fetched_tokens += got * ps
            return got * ps
        finally:
            if pinned:
                self.tier.dec_host_lock_ref(parent)
            if device_lock is not None:
                assert device is not None
                cache.dec_lock_ref(device, device_lock)

    def _read(self, keys: list[PageKey]) -> int:
        """How many leading pages of `keys` arrived and verified."""
        got = 0
        for page in self.backend.batch_get(keys, len(_EMPTY)):
            if not isinstance(page, memoryview):
                break
            got += 1
        return got

    def _insert_host(self, parent: TreeNode, units: bytes, key: RadixKey, slots: Slots) -> None:
        tree, full = self.tier.cache.tree, self.tier.full
        leaf = tree._new_node(units, key.extra_key, parent)
        parent.children[leaf.child_key(self.page_size)] = leaf
        leaf.data[0].host_value = slots
        full.host_tokens += leaf.num_tokens
        self.tier.host_pools.note_usage()
        full.update_host_leaf(parent)
        full.update_host_leaf(leaf)
        sink = self.tier.cache.event_sink
        if sink is not None:  # pages that arrived from L3 now sit on the host
            sink.on_stored(leaf, MEDIUM_CPU_PINNED)

    def counters(self) -> dict[str, object]:
        """The backend's counters and this tier's, for `--json`."""
        return {**asdict(self.backend.stats()), "tier": self.stats.as_dict()}

    def close(self) -> None:
        self.writer.close()
