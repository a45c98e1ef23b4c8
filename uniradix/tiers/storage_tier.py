"""StorageTier: wires the L3 store (`uniradix.storage`) under the L2 host tier.

**Backup** (write-through to L3): when a host backup of a node chain is acked
(`HostTier.writing_check`, or a write-back victim's backup at device eviction), the chain's
pages are handed to a `BackupWriter` under keys from their chained page digests
(`KeySpace.keys_for` over the chain's whole path, so the chain is rooted in its `extra_key`
namespace). Only the contiguous stored prefix a writer result reports counts as stored
(`stats.stored_pages`); those pages are announced to the event sink on the `DISK` medium,
and so are a hybrid chain's stored windows and states (`on_aux_stored`).
While L3 is off or backups are paused after a refused write (`StorageBackend.writable`), a
backup is skipped before its keys are computed (`stats.off_backup_pages`).

**Hybrid caches** (`uniradix.tiers.storage_aux`): with a chain's full pages go the SWA
window pages and the Mamba states its host copies hold, each pool under its own key space;
a prefetch fetches only up to the deepest page boundary where every component can resume.

**Payload.** A cache with model layers stores each page's bytes as the host pool lays them
out (`HostKVPool.page_bytes`: K then V of every layer), copied at submit time, so a later
host eviction cannot change what is written; the key space binds dtype and layer shape, so a
model of another shape never reads them. A zero-layer (simulation) cache stores empty
payloads: the page header (fingerprint, digest, length, checksum) is what is verified.

**Prefetch** (`uniradix.tiers.storage_prefetch`): `start_prefetch(key)` while a request
waits, `finish_prefetch(run)` at its admission (after `wait_prefetch(run)`, which blocks as
the stop policy says), `cancel_prefetch(run)` when it is aborted. `prefetch(key)` does all
three at once and waits for the whole fetch (tests, a caller without a queue).
Stop policies (`prefetch_policy`): `best_effort` takes what arrived at admission,
`wait_complete` waits for the whole fetch (always bounded: every store call is bounded by the
backend's timeouts and its circuit breaker), `timeout` waits until the fetch ended or its
deadline (`PrefetchTimeout`: base + per-1k-token term) passed.

**Determinism.** A replay sets `sync_writes`: each probe first waits for the queued backups,
so what a probe finds does not depend on the writer thread's timing; with `wait_complete` a
fetch always runs to its end, so a replay's figures are reproducible run to run.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Protocol

import numpy as np

from uniradix.event_sink import MEDIUM_DISK
from uniradix.hashing.node_digests import NodeDigests
from uniradix.hashing.page import DIGEST_BYTES, namespace_seed
from uniradix.hashing.storage_keys import KeySpace, PageKey
from uniradix.key import RadixKey
from uniradix.memory.host_kv import HostKVPool, HostMambaStates
from uniradix.storage.backend import StorageBackend
from uniradix.storage.io import BackupWriter, Prefetcher, PrefetchPolicy, PrefetchTimeout
from uniradix.storage.page_format import Payload
from uniradix.tiers.storage_aux import AuxJob, AuxStorage
from uniradix.tiers.storage_prefetch import PrefetchRun, StoragePrefetches, StorageTierStats
from uniradix.tiers.views import HostTierView
from uniradix.tree.node import TreeNode
from uniradix.types import Slots


class HostTierWithStorage(HostTierView, Protocol):
    """The host tier as its L3 wiring sees it: `storage` is where it hangs itself."""

    storage: StorageTier | None


DEFAULT_PREFETCH_THRESHOLD = 256
PREFETCH_POLICIES = tuple(p.value for p in PrefetchPolicy)
_EMPTY = b""


class StorageTier:
    def __init__(
        self,
        tier: HostTierWithStorage,
        backend: StorageBackend,
        model_fingerprint: str,
        prefetch_threshold: int = DEFAULT_PREFETCH_THRESHOLD,
        cache_salt: str | None = None,
        prefetch_policy: str = PrefetchPolicy.BEST_EFFORT.value,
        prefetch_timeout: PrefetchTimeout | None = None,
        host_kv: HostKVPool | None = None,
        host_swa: HostKVPool | None = None,
        host_states: HostMambaStates | None = None,
    ) -> None:
        if (
            isinstance(prefetch_threshold, bool)
            or not isinstance(prefetch_threshold, int)
            or prefetch_threshold < 1
        ):
            raise ValueError(f"prefetch_threshold must be an int >= 1, got {prefetch_threshold!r}")
        if prefetch_policy not in PREFETCH_POLICIES:
            raise ValueError(
                f"prefetch_policy must be one of {PREFETCH_POLICIES}, got {prefetch_policy!r}"
            )
        self.tier = tier
        self.backend = backend
        self.page_size = ps = tier.cache.page_size
        self.host_kv = host_kv if host_kv is not None and host_kv.num_layers else None
        if self.host_kv is None:
            self.page_nbytes = 0
            self.keyspace = KeySpace(model_fingerprint, "none", "sim", ps, "full")
        else:
            kv = self.host_kv
            self.page_nbytes = kv.page_nbytes()
            shape = f"kv{kv.num_layers}x{kv.num_kv_heads}x{kv.head_dim}"
            dtype = str(kv.dtype).removeprefix("torch.")
            self.keyspace = KeySpace(model_fingerprint, dtype, shape, ps, "full")
        self.digests = NodeDigests.of_tree(tier.cache.tree, tier.cache.settings.is_eagle)
        self.prefetch_threshold = prefetch_threshold
        self.cache_salt = cache_salt
        self.writer = BackupWriter(backend)
        # ticket -> the chain, root-first, and where it starts (tokens from the root)
        self._backups: dict[int, tuple[list[TreeNode], int]] = {}
        self._aux_backups: dict[int, AuxJob] = {}  # ticket -> its auxiliary job
        aux = AuxStorage(tier, backend, model_fingerprint, host_swa, host_states)
        self.aux = aux if aux.active else None
        # A full writer queue drops the chain (a server must not block); a replay sets this
        # to wait for the queue instead, so its figures show the store, not the queue bound.
        self.backpressure = False
        self.sync_writes = False  # see the module's "Determinism"
        self.stats = StorageTierStats()
        self.prefetcher = Prefetcher(backend, PrefetchPolicy(prefetch_policy), prefetch_timeout)
        self.prefetches = StoragePrefetches(self, self.prefetcher)
        tier.storage = self

    # ------------------------------------------------------------------ backup
    def backup(self, chain: list[TreeNode]) -> None:
        """Queues the pages of a freshly host-backed chain (any order; contiguous)."""
        if not chain:
            return
        tree, ps = self.tier.cache.tree, self.page_size
        if not self.backend.writable():
            self.stats.off_backup_pages += sum(n.num_tokens for n in chain) // ps
            return
        chain = sorted(chain, key=tree.prefix_len)  # root-first
        # The path's digests from the cache's shared table: hashed once per node, not per
        # backup (the event recorder reads the same ones when the namespace seeds agree).
        path = self.digests.path(chain[-1], namespace_seed(chain[-1].extra_key, self.cache_salt))
        digests = [path[a : a + DIGEST_BYTES] for a in range(0, len(path), DIGEST_BYTES)]
        keys = self.keyspace.keys(digests)
        num_pages = sum(n.num_tokens for n in chain) // ps
        pages = keys[len(keys) - num_pages :] if num_pages else []
        if not pages:
            return
        payloads = self._payloads(chain, len(pages))
        ticket = self._submit(pages, payloads)
        if ticket is None:
            self.stats.backup_pages_dropped += len(pages)
        else:
            self.stats.backup_pages_submitted += len(pages)
            self._backups[ticket] = (chain, tree.prefix_len(chain[0]) - chain[0].num_tokens)
            # The auxiliary pools' pages follow their chain's (one FIFO writer): a resumable
            # boundary never has its window or state stored before its full pages.
            jobs = self.aux.backup_jobs(chain, keys) if self.aux is not None else []
            for job in jobs:
                aux_ticket = self._submit(job.keys, job.payloads)
                if aux_ticket is None:
                    self.stats.aux_pages_dropped += len(job.keys)
                else:
                    self._aux_backups[aux_ticket] = job
        self.poll()

    def _submit(self, keys: list[PageKey], payloads: list[Payload]) -> int | None:
        ticket = self.writer.submit(keys, payloads)
        if ticket is None and self.backpressure:
            self.writer.flush()  # a replay has no clock to protect: wait rather than drop
            ticket = self.writer.submit(keys, payloads)
        return ticket

    def _payloads(self, chain: list[TreeNode], num_pages: int) -> list[Payload]:
        if self.host_kv is None:
            return [_EMPTY] * num_pages
        values = [v for n in chain if (v := n.data[0].host_value) is not None]
        slots: Slots = np.concatenate(values)
        data = self.host_kv.page_bytes(slots[:: self.page_size] // self.page_size).numpy()
        return [memoryview(data[i]) for i in range(num_pages)]

    def poll(self) -> None:
        for result in self.writer.poll():
            job = self._aux_backups.pop(result.ticket, None)
            if job is not None:
                pool = job.component.name
                self.stats.aux_stored_pages[pool] = (
                    self.stats.aux_stored_pages.get(pool, 0) + result.stored_pages
                )
                self._report_aux_stored(job, result.stored_pages)
                continue
            self.stats.stored_pages += result.stored_pages
            chain, start = self._backups.pop(result.ticket, ([], 0))
            self._report_stored(chain, start, result.stored_pages)

    def _report_stored(self, chain: list[TreeNode], start: int, stored_pages: int) -> None:
        """Tells the event sink which nodes now sit whole in L3: those within the chain's
        stored span `[start, start + stored)` (tokens from the root). Splits since the backup
        may have cut the chain's nodes (a node keeps its lower part, a new parent takes the
        upper), so the span's nodes are read from the tree now, up from its deepest one."""
        sink = self.tier.cache.event_sink
        tree = self.tier.cache.tree
        last = next((n for n in reversed(chain) if tree.in_tree(n)), None)
        if sink is None or last is None:
            return
        end = start + stored_pages * self.page_size
        nodes, pos = [], tree.prefix_len(last)
        for node in tree.path_to_root(last):
            if pos - node.num_tokens < start:
                break
            if pos <= end:
                nodes.append(node)
            pos -= node.num_tokens
        for node in reversed(nodes):
            sink.on_stored(node, MEDIUM_DISK)

    def _report_aux_stored(self, job: AuxJob, stored_pages: int) -> None:
        """Tells the event sink which nodes' windows or states now sit whole in L3."""
        sink = self.tier.cache.event_sink
        if sink is None:
            return
        left = stored_pages
        for node, pages in job.owners:
            if pages > left:
                return
            left -= pages
            if self.tier.cache.tree.in_tree(node):
                sink.on_aux_stored(node, job.component.index, pages, MEDIUM_DISK)

    def flush(self) -> None:
        """Waits for every queued backup (replay end, tests)."""
        self.writer.flush()
        self.poll()

    # ------------------------------------------------------------------ prefetch
    def start_prefetch(self, key: RadixKey) -> PrefetchRun | None:
        """Starts fetching the stored pages of `key` past its device+host hit (None when
        nothing is worth fetching or there is no host room)."""
        return self.prefetches.start(key)

    def wait_prefetch(self, run: PrefetchRun) -> None:
        self.prefetches.wait(run)

    def finish_prefetch(self, run: PrefetchRun) -> int:
        """Inserts what arrived as host copies; returns the tokens that gained one."""
        return self.prefetches.finish(run)

    def cancel_prefetch(self, run: PrefetchRun) -> None:
        self.prefetches.cancel(run)

    def prefetch(self, key: RadixKey) -> int:
        """Fetches the stored pages of `key` past its device+host hit into the host tier
        and waits for the whole fetch; returns the tokens that gained a host copy."""
        run = self.start_prefetch(key)
        if run is None:
            return 0
        self.prefetcher.wait(run.handle, complete=True)
        return self.finish_prefetch(run)

    @property
    def reserved_tokens(self) -> int:
        """Host slots reserved by prefetches in flight."""
        return self.prefetches.reserved_tokens

    # ------------------------------------------------------------------ life cycle
    def counters(self) -> dict[str, object]:
        """The backend's counters and this tier's, for `--json`."""
        return {**asdict(self.backend.stats()), "tier": self.stats.as_dict()}

    def reset(self) -> None:
        """The cache was reset: in-flight prefetches are void, queued backups finish."""
        self.prefetches.abandon_all()
        self.flush()
        self._backups.clear()
        self._aux_backups.clear()

    def close(self) -> None:
        self.prefetches.cancel_all()
        self.prefetcher.close()
        self.writer.close()
        self._backups.clear()
        self._aux_backups.clear()
