"""L3 prefetch of a waiting request: probe, reserve, fetch in the background, insert.

`start(key)` (the scheduler calls it while the request waits in the queue):

0. while L3 is off (`StorageBackend.available`), nothing: no match, no keys, no probe
   (counted in `off_probes`, `off_probe_tokens`);
1. match `key`; when it extends at least `prefetch_threshold` tokens past the device+host
   hit, probe the store (`batch_exists`, bounded by the backend's timeouts and breaker);
2. reserve host slots for the stored pages, never more than half the host pool in flight
   across all prefetches (host leaves are evicted to make room, as a backup would);
3. device-lock the deepest device node of the match, so the path the pages hang under
   stays, and hand the page keys to the `Prefetcher`'s worker thread.

`finish(run)` (at admission, once the stop policy allows: `wait(run)` blocks as the policy
says) takes the pages that arrived, writes their bytes into the reserved slots and gives
them to `HostTier.insert_host`; `cancel(run)` (an aborted request, a reset) drops them.
Either way every reserved slot not given to a node is freed and the device lock released,
so no path (store down, short read, corrupt page, timeout, abort) leaks a slot or a lock.
The host-only part of the match is not pinned while the request waits: if host eviction
takes it meanwhile the pages cannot attach and are dropped (`dropped_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from uniradix.key import RadixKey
from uniradix.storage.io import Prefetcher, PrefetchHandle
from uniradix.tree.node import TreeNode
from uniradix.types import IncLockRefResult, MatchPrefixParams, Slots

if TYPE_CHECKING:
    from uniradix.hashing.storage_keys import KeySpace
    from uniradix.memory.host_kv import HostKVPool
    from uniradix.storage.backend import StorageBackend
    from uniradix.tiers.host_aux import HostAux
    from uniradix.tiers.storage_aux import AuxPlan, AuxStorage
    from uniradix.tiers.views import HostTierView


@dataclass
class StorageTierStats:
    """Pages and tokens moved between the host tier and L3 since the cache was built."""

    backup_pages_submitted: int = 0
    backup_pages_dropped: int = 0  # the writer's queue was full
    stored_pages: int = 0  # contiguous prefixes the writer reported stored
    prefetches: int = 0  # probes that found at least one page to fetch
    probed_pages: int = 0  # pages the probes found stored
    fetched_tokens: int = 0  # tokens that gained a host copy from L3
    dropped_tokens: int = 0  # fetched tokens whose path left the tree while they came
    reserve_failed: int = 0  # probes with stored pages but no host room
    cancelled: int = 0  # prefetches of aborted requests
    hit_tokens: int = 0  # fetched tokens a request then loaded back (set by the scheduler)
    # Hybrid caches (`uniradix.tiers.storage_aux`):
    aux_pages_dropped: int = 0  # SWA pages / Mamba states the writer's full queue refused
    aux_stored_pages: dict[str, int] = field(default_factory=dict)  # by pool: "swa", "mamba"
    unresumable_pages: int = 0  # probed full pages past the last resumable boundary
    unresumable_tokens: int = 0  # fetched tokens dropped: the aux part missed or had no room
    # While L3 was off (or backups paused after a refused write): the work skipped.
    off_backup_pages: int = 0  # pages not backed up
    off_probes: int = 0  # prefetch probes not made
    off_probe_tokens: int = 0  # tokens of the keys those probes would have looked up

    def as_dict(self) -> dict[str, object]:
        return {
            f.name: dict(v) if isinstance(v := getattr(self, f.name), dict) else v
            for f in fields(self)
        }


class PrefetchSource(Protocol):
    """The L3 wiring (`StorageTier`) as its prefetches use it."""

    @property
    def tier(self) -> HostTierView: ...
    @property
    def stats(self) -> StorageTierStats: ...
    @property
    def page_size(self) -> int: ...
    @property
    def prefetch_threshold(self) -> int: ...
    @property
    def sync_writes(self) -> bool: ...
    @property
    def keyspace(self) -> KeySpace: ...
    @property
    def cache_salt(self) -> str | None: ...
    @property
    def host_kv(self) -> HostKVPool | None: ...
    @property
    def page_nbytes(self) -> int: ...
    @property
    def aux(self) -> AuxStorage | None: ...
    @property
    def backend(self) -> StorageBackend: ...
    def flush(self) -> None: ...


@dataclass
class PrefetchRun:
    """One request's prefetch: key tokens `[start, start + len(slots))` into `slots`."""

    key: RadixKey
    start: int
    slots: Slots
    handle: PrefetchHandle
    anchor: TreeNode | None  # the device node locked while the pages are fetched
    lock: IncLockRefResult | None
    aux: AuxPlan | None = None  # a hybrid cache's window pages and state, fetched after

    @property
    def num_tokens(self) -> int:
        return int(self.slots.shape[0])


class StoragePrefetches:
    def __init__(self, storage: PrefetchSource, prefetcher: Prefetcher) -> None:
        self.storage = storage
        self.prefetcher = prefetcher
        self.runs: dict[int, PrefetchRun] = {}  # the runs in flight, by id
        self.reserved_tokens = 0  # host slots held by runs in flight

    def start(self, key: RadixKey) -> PrefetchRun | None:
        storage = self.storage
        tier, stats = storage.tier, storage.stats
        cache, ps = tier.cache, storage.page_size
        num_pages = len(key) // ps
        if num_pages * ps < storage.prefetch_threshold:
            return None
        if not storage.backend.available():
            stats.off_probes += 1
            stats.off_probe_tokens += num_pages * ps
            return None
        match = cache.match_prefix(MatchPrefixParams(key))
        hit = match.device_prefix_len + match.host_hit_length
        if num_pages * ps - hit < storage.prefetch_threshold or hit % ps:
            return None
        if storage.sync_writes:
            storage.flush()  # a replay probes a store that holds every backup so far
        all_keys = storage.keyspace.keys_for(key, storage.cache_salt)
        keys = all_keys[hit // ps : num_pages]
        stored = self.prefetcher.probe(keys)
        if stored == 0:
            return None
        stats.prefetches += 1
        stats.probed_pages += stored
        budget = tier.host_pools.full.capacity // 2 - self.reserved_tokens
        stored = min(stored, budget // ps)  # half the host pool in flight at most
        plan = None
        if storage.aux is not None and stored > 0:
            # Only up to where every component can resume (`uniradix.tiers.storage_aux`).
            plan = storage.aux.plan(all_keys, hit // ps, hit // ps + stored)
            resumable = 0 if plan is None else plan.boundary - hit // ps
            stats.unresumable_pages += stored - resumable
            stored = resumable
            if stored == 0:
                return None
        anchor = match.last_device_node
        lock = None if anchor is cache.tree.root else cache.inc_lock_ref(anchor)
        slots = tier.alloc_host(stored * ps) if stored else None
        if slots is None and stored:
            # Host room held by copies of device-resident nodes (a host no bigger than the
            # device, under write-through): the fetched pages are worth more there.
            tier.drop_device_copies_host(stored * ps - tier.host_pools.full.available_size())
            slots = tier.alloc_host(stored * ps)
        if slots is None:
            stats.reserve_failed += 1
            if lock is not None:
                cache.dec_lock_ref(anchor, lock)
            return None
        fetch = keys[:stored] + ([] if plan is None else plan.keys)
        # Pages of several pools differ in size: `finish` checks each one's length then.
        handle = self.prefetcher.start(
            fetch, stored * ps, storage.page_nbytes if plan is None else None
        )
        run = PrefetchRun(key, hit, slots, handle, None if lock is None else anchor, lock, plan)
        self.runs[id(run)] = run
        self.reserved_tokens += run.num_tokens
        return run

    def ready(self, run: PrefetchRun) -> bool:
        """Whether the stop policy lets the request stop waiting for `run`."""
        return self.prefetcher.can_finish(run.handle)

    def wait(self, run: PrefetchRun) -> None:
        """Blocks until the stop policy lets the request stop waiting for `run`."""
        self.prefetcher.wait(run.handle)

    def finish(self, run: PrefetchRun) -> int:
        """Inserts what arrived; returns the tokens that gained a host copy."""
        pages = self.prefetcher.finish(run.handle)
        storage, ps = self.storage, self.storage.page_size
        tier, cache = storage.tier, storage.tier.cache
        aux = None
        if run.aux is not None:
            pages, aux = self._take_aux(run, pages)
        got = len(pages) * ps
        inserted = 0
        if got:
            if storage.host_kv is not None and storage.page_nbytes:
                data = torch.frombuffer(bytearray(b"".join(pages)), dtype=torch.uint8)
                storage.host_kv.set_page_bytes(run.slots[:got:ps] // ps, data.view(len(pages), -1))
            # The path may have lost its host part while the request waited (see above).
            match = cache.match_prefix(MatchPrefixParams(run.key))
            if match.device_prefix_len + match.host_hit_length >= run.start:
                inserted = tier.insert_host(run.key, run.slots[:got], run.start, aux)
                storage.stats.fetched_tokens += inserted
            else:
                storage.stats.dropped_tokens += got
                tier.host_pools.full.free(run.slots[:got], node_value=True)
                if aux is not None:
                    _free_host_aux(tier, aux)
        self._release(run, run.slots[got:])
        return inserted

    def _take_aux(
        self, run: PrefetchRun, pages: list[memoryview]
    ) -> tuple[list[memoryview], HostAux | None]:
        """A hybrid run is all or nothing: its full pages count only when every page,
        window and state arrived whole and found host room (else they are dropped)."""
        storage, plan = self.storage, run.aux
        assert plan is not None and storage.aux is not None
        num_full = run.num_tokens // storage.page_size
        sizes = [storage.page_nbytes] * num_full + storage.aux.payload_sizes(plan)
        aux = None
        if len(pages) == len(sizes) and all(
            p.nbytes == n for p, n in zip(pages, sizes, strict=True)
        ):
            aux = storage.aux.to_host(plan, pages[num_full:])
        if aux is None:
            storage.stats.unresumable_tokens += run.num_tokens
            return [], None
        return pages[:num_full], aux

    def cancel(self, run: PrefetchRun) -> None:
        """Drops the fetch and everything it reserved (an aborted request)."""
        self.prefetcher.cancel(run.handle)
        self.storage.stats.cancelled += 1
        self._release(run, run.slots)

    def cancel_all(self) -> None:
        for run in list(self.runs.values()):
            self.cancel(run)

    def abandon_all(self) -> None:
        """Stops every fetch without releasing anything: the cache's reset voided the
        locks and emptied the host pool."""
        for run in self.runs.values():
            self.prefetcher.cancel(run.handle)
        self.runs.clear()
        self.reserved_tokens = 0

    def _release(self, run: PrefetchRun, unused: Slots) -> None:
        tier = self.storage.tier
        if unused.shape[0]:
            tier.host_pools.full.free(np.ascontiguousarray(unused), node_value=True)
        if run.lock is not None:
            assert run.anchor is not None
            tier.cache.dec_lock_ref(run.anchor, run.lock)
        del self.runs[id(run)]
        self.reserved_tokens -= run.num_tokens


def _free_host_aux(tier: HostTierView, aux: HostAux) -> None:
    for name, slots in (("swa", aux.swa), ("mamba", aux.mamba)):
        if slots is not None:
            tier.host_pools.aux[name].free(slots, node_value=True)
