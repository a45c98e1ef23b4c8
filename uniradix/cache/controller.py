"""UnifiedRadixCache: the controller. It owns the pools, runs the tree and its components,
and executes what they decide (every `FreeSlots` action, in order, right after each step).

Typical scheduler use::

    r = cache.match_prefix(MatchPrefixParams(RadixKey(prompt), req=req))  # Mamba: state slots
    req.lock = cache.inc_lock_ref(r.last_device_node)          # keep the prefix alive
    ... allocate slots for the rest, run prefill in chunks ...
    cache.cache_unfinished_req(req)                             # after each chunk
    ... decode ...
    cache.cache_finished_req(req)                               # publish, unlock, free row

A request matched with `req=` but never admitted gives its slots back with
`cache.release_req_slots(req)`. The Mamba protocol is in `uniradix.cache.mamba_requests`; SWA adds
`free_out_of_window_slots(req)` and `release_window_lock(req)` for running requests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from uniradix.cache import request_caching
from uniradix.cache.checks import format_tree, raise_if_broken
from uniradix.cache.component_sizes import ComponentSizes
from uniradix.cache.eviction import evict_components
from uniradix.cache.insert_slots import checked_value, duplicate_frees
from uniradix.cache.lock_receipts import LockReceipts
from uniradix.cache.mamba_requests import MambaRequests, NoMambaRequests
from uniradix.cache.paths import concat_values, cpu_indices
from uniradix.cache.sessions import NullSessions, SessionCache, SessionRelease
from uniradix.components.base import TreeComponent, match_rules, overriding
from uniradix.components.registry import (
    DEFAULT_REGISTRY,
    ComponentRegistry,
    ComponentSpec,
)
from uniradix.event_sink import MEDIUM_GPU, CacheEventSink
from uniradix.key import RadixKey
from uniradix.memory.pools import CachePools
from uniradix.tiers.null import NoHostTier
from uniradix.tree.core import TreeCore
from uniradix.tree.node import TreeNode
from uniradix.tree.policy import eviction_policy
from uniradix.types import (
    CacheSettings,
    ComponentType,
    DecLockRefParams,
    EvictParams,
    EvictResult,
    FreeKind,
    FreeSlots,
    IncLockRefResult,
    InsertContext,
    InsertParams,
    InsertResult,
    MatchPrefixParams,
    MatchResult,
    Req,
    Slots,
)

_new_tuple = tuple.__new__
# MatchResult's fields after the first four, at their defaults: a match with nothing else to
# report builds its result from these without the NamedTuple's keyword handling
_MATCH_DEFAULTS = tuple(MatchResult._field_defaults[f] for f in MatchResult._fields[4:])


class UnifiedRadixCache(ComponentSizes):
    def __init__(
        self,
        pools: CachePools,
        settings: CacheSettings | None = None,
        components: Sequence[ComponentSpec] = (ComponentType.FULL,),
        component_registry_override: Mapping[ComponentType, type[TreeComponent]] | None = None,
        registry: ComponentRegistry | None = None,
    ) -> None:
        """`components`: built-in types, names registered in `registry` (default: the
        package's default registry) or component classes, FULL first; a component from
        outside finds its pool in `pools.extra` under its name."""
        settings = settings or CacheSettings(page_size=pools.kv_allocator.page_size)
        registry = registry or DEFAULT_REGISTRY
        classes = registry.resolve_all(components, component_registry_override)
        if pools.kv_allocator.page_size != settings.page_size:
            raise ValueError(
                f"allocator page_size={pools.kv_allocator.page_size} "
                f"!= cache page_size={settings.page_size}"
            )
        self.pools = pools
        self.settings = settings
        self.page_size = settings.page_size
        self.tree = TreeCore(
            len(components), settings.page_size, eviction_policy(settings.eviction_policy)
        )
        self.components: list[TreeComponent] = [
            cls(i, self.tree, settings) for i, cls in enumerate(classes)
        ]
        self.tree.split_hooks = list(self.components)
        for c in self.components:
            c.attach_pools(pools)
            c.attach_peers(self.components)
        self._by_type = {c.component_type: c for c in self.components}
        self._aux = self.components[1:]
        # insert_overlap hooks: only the components that override it (the default adopts
        # nothing, so calling it would change nothing)
        self._overlapping = overriding(self.components, "insert_overlap")
        self._mamba = self._by_type.get(ComponentType.MAMBA)
        self.host_tier: NoHostTier = NoHostTier()  # `uniradix.tiers.controller` attaches one
        self._validating = overriding(self.components, "match_validator")
        self._match_rules = match_rules(self.components)
        self._insert_checkers = overriding(self.components, "check_insert")
        self._finalizers = overriding(self.components, "finalize_match")
        # Requests' per-step window calls reach only the components that act on them.
        self._window_freers = overriding(self._aux, "free_out_of_window")
        self._window_lockers = overriding(self._aux, "release_window_lock")
        self._free: dict[FreeKind | str, Callable[[Slots, bool], None]] = pools.free_functions()
        self._receipts = LockReceipts()
        self._outstanding = self._receipts.outstanding
        self._receipt_ids = self._receipts.ids
        self.device = pools.kv_allocator.device
        self._on_cpu = self.device.type == "cpu"
        self._num_pages = pools.kv_allocator.capacity // settings.page_size  # full-KV pages
        self._empty: Slots = np.empty(0, dtype=np.int64)
        self._no_indices = self.to_device(self._empty)  # what a match that found nothing returns
        self.tree.root.data[0].value = self._empty
        self.mamba_requests = (
            MambaRequests(self) if ComponentType.MAMBA in self._by_type else NoMambaRequests()
        )
        self.sessions: SessionCache | NullSessions = (
            SessionCache(self.tree, self.components, settings)
            if settings.enable_session_cache
            else NullSessions()
        )
        self.event_sink: CacheEventSink | None = None

    def set_event_sink(self, sink: CacheEventSink | None) -> None:
        """Reports full-KV stores, removes and clears to `sink` from now on (None: stop);
        the sink also follows splits, as a split hook of the tree."""
        hooks = self.tree.split_hooks
        if self.event_sink is not None:
            hooks.remove(self.event_sink)
        self.event_sink = sink
        if sink is not None:
            hooks.append(sink)

    # ------------------------------------------------------------------ keys
    def make_key(
        self, token_ids: Sequence[int] | torch.Tensor | np.ndarray, extra_key: str | None = None
    ) -> RadixKey:
        """The key this cache uses for `token_ids` (bigram view when EAGLE is on)."""
        return RadixKey(token_ids, extra_key, is_bigram=self.settings.is_eagle)

    def _aligned_len(self, key: RadixKey) -> int:
        """Units of `key` in whole pages (the tree reads no further; no copy is made)."""
        if not isinstance(key, RadixKey):
            raise TypeError(f"key must be a RadixKey, got {type(key).__name__}")
        if key.is_bigram != self.settings.is_eagle:
            raise ValueError(
                f"key is_bigram={key.is_bigram} but the cache has is_eagle={self.settings.is_eagle}"
            )
        n = key.start + (len(key.units) >> 3)  # `len(key)` inline: runs per match and insert
        return n - n % self.page_size

    # ------------------------------------------------------------------ match
    def match_prefix(self, params: MatchPrefixParams) -> MatchResult:
        """Longest cached prefix of `params.key` usable by every component.

        Mutates the tree: splits a node the key ends inside, refreshes access times. With
        `params.req` on a Mamba cache, gives the request its state slots (copy-on-write of
        the matched state, evicting Mamba states if short; see `uniradix.cache.mamba_requests`).
        """
        num_units = self._aligned_len(params.key)
        validators = []
        for c in self._validating:  # a loop, not a comprehension: runs per match
            validator = c.match_validator()
            if validator is not None:
                validators.append(validator)
        walk = self.tree.match(params.key, num_units, validators, *self._match_rules)
        path, k = walk.path, walk.num_accepted
        accepted = path if k == len(path) else path[:k]  # no copy of a path accepted whole
        if accepted:
            self.tree.touch_path(accepted)
            last = accepted[-1]
            if self._on_cpu:
                indices = cpu_indices(accepted, self.tree.slot_tensors)
            else:
                indices = self.to_device(concat_values([n.data[0].value for n in accepted]))
            num_slots = indices.shape[0]
        else:  # nothing usable (most Mamba misses): the shared empty tensor, no conversion
            indices, num_slots, last = self._no_indices, 0, self.tree.root
        extra = None
        for c in self._finalizers:
            fields = c.finalize_match(walk, params)
            if fields:  # SWA reports none: no keyword merging for it
                extra = fields if extra is None else {**extra, **fields}
        if extra is None:
            # `tuple.__new__` skips the NamedTuple's Python-level `__new__` (built per match);
            # the defaults are spelled out in field order
            result = _new_tuple(
                MatchResult, (indices, num_slots, last, walk.matched_len, *_MATCH_DEFAULTS)
            )
        else:
            result = MatchResult(indices, num_slots, last, walk.matched_len, **extra)
        if params.req is not None:  # Mamba's copy-on-write (nothing to do without a request)
            self.mamba_requests.after_match(params, result)
        return result

    # ------------------------------------------------------------------ insert
    def insert(self, params: InsertParams) -> InsertResult:
        """Caches `params.key` -> `params.value`; frees the value's duplicate slots."""
        key = params.key
        num_units = self._aligned_len(key)
        value = checked_value(params, self.page_size)
        key_len = value.shape[0]  # checked: one slot per unit of the key
        if num_units != key_len:  # no view for a key of whole pages (the usual insert)
            value = value[:num_units]
        if not 0 <= params.prev_prefix_len <= key_len:
            raise ValueError(f"prev_prefix_len={params.prev_prefix_len} outside [0, {key_len}]")
        actions: list[FreeSlots] = []
        ins = InsertContext(params, value, actions)
        for c in self._insert_checkers:
            c.check_insert(ins)
        prev, aux = params.prev_prefix_len, self._overlapping
        # Only a host tier leaves host-only (demoted) nodes in the tree; without one nothing
        # is revived, and the per-node check would cost a sink's insert ~2%.
        revival_sink = self.event_sink if self.host_tier.enabled else None
        free_args = (value, params.swa_evicted_seqlen, self.page_size, self._num_pages)

        def on_overlap(node: TreeNode, offset: int, num: int) -> None:
            # An insert over a demoted (host-only) node revives its device copy.
            revived = revival_sink is not None and node.data[0].value is None
            adopted_from = num
            for c in aux:
                adopted_from = min(adopted_from, c.insert_overlap(ins, node, offset, num))
            if revived and revival_sink is not None and node.data[0].value is not None:
                revival_sink.on_stored(node, MEDIUM_GPU)
            start = max(0, prev - offset)
            if start < adopted_from:
                actions.extend(duplicate_frees(node, num, offset, start, adopted_from, *free_args))

        target, prefix_len, is_new = self.tree.insert(
            key, num_units, on_overlap, params.inserted_len, params.priority
        )
        # A copy: never view a request row (and no slice first when the whole key is new).
        if is_new:
            ins.leaf_value = (value[prefix_len:] if prefix_len else value).copy()
        mamba = self._mamba
        mamba_exist = mamba is not None and (target is self.tree.root or mamba.has_value(target))
        for c in self.components:
            c.commit_insert(ins, target)
        if is_new:
            self.tree.update_leaf(target)
            if self.event_sink is not None:
                self.event_sink.on_stored(target, MEDIUM_GPU)
        self.apply(actions)
        if self.host_tier.enabled:
            self.host_tier.after_insert(target)
        return InsertResult(prefix_len, target, mamba_exist)

    # ------------------------------------------------------------------ evict
    def evict(self, params: EvictParams) -> EvictResult:
        """Evicts at least the requested units per component where evictable ones exist
        (see `uniradix.eviction`); frees are applied after every step."""
        return evict_components(self, params)

    def apply(self, actions: list[FreeSlots]) -> None:
        """Executes the tree's frees, in order."""
        for action in actions:
            self._free[action.kind](action.indices, action.node_value)

    # ------------------------------------------------------------------ locks
    def inc_lock_ref(self, node: TreeNode) -> IncLockRefResult:
        """Protects the prefix ending at `node` from eviction; returns the receipt to give
        back to `dec_lock_ref` exactly once."""
        if not isinstance(node, TreeNode) or not self.tree.in_tree(node):
            raise ValueError(f"inc_lock_ref: {node!r} is not a node of this cache's tree")
        delta, uuids = 0, {}
        for c in self.components:
            moved, uuids[c.component_type] = c.lock(node)
            if c.index == 0:
                delta = moved
        self.tree.update_leaf(node)
        receipt = IncLockRefResult(next(self._receipt_ids), node, delta, uuids)
        self._outstanding[receipt.receipt_id] = receipt
        return receipt

    def dec_lock_ref(
        self, node: TreeNode, params: DecLockRefParams | IncLockRefResult | None = None
    ) -> None:
        """Releases one lock on `node`: the receipt's (`params`), or any one taken on `node`."""
        outstanding = self._outstanding
        found = None if params is None else outstanding.get(params.receipt_id)
        if found is not None and found.node is node and params is not None and params.node is node:
            del outstanding[found.receipt_id]
            receipt = found
        else:  # no receipt named, or one not outstanding / anchored elsewhere: take raises
            receipt = self._receipts.take(node, params)
        for c in reversed(self.components):
            if c.component_type not in receipt.skipped_lock_components:
                c.unlock(node, receipt.component_lock_uuids[c.component_type])
        self.tree.update_leaf(node)

    # ------------------------------------------------------------------ requests
    def cache_unfinished_req(self, req: Req, chunked: bool = False) -> None:
        """Publishes the request's computed KV (`token_ids[:kv_committed_len]`, page aligned)
        mid-flight, e.g. after a prefill chunk: the row then points at the tree's slots and
        the request's lock moves to the new last node. With Mamba, the published prefix may
        stop at the last tracked state (see `uniradix.cache.mamba_requests`)."""
        request_caching.cache_unfinished_req(self, req)

    def cache_finished_req(self, req: Req, is_insert: bool = True) -> None:
        """Publishes the finished request's KV (when `is_insert`), frees every slot the tree
        did not take, releases its lock, its row and its Mamba slots."""
        request_caching.cache_finished_req(self, req, is_insert)

    def release_req_slots(self, req: Req) -> None:
        """Gives back the slots `match_prefix(..., req=req)` handed a request that will never
        be admitted (its Mamba slots). Idempotent; a no-op without Mamba."""
        self.mamba_requests.release(req)

    def free_out_of_window_slots(self, req: Req) -> int:
        """Frees the slots of the running request's own positions that its attention will
        never read again (SWA KV that left the window), advancing `req.swa_evicted_seqlen`.
        Returns the slots freed (always 0 on a cache without windowed components)."""
        return request_caching.free_out_of_window_slots(self, req)

    @property
    def has_window_steps(self) -> bool:
        """Whether `free_out_of_window_slots` and `release_window_lock` can ever act here (a
        windowed component such as SWA); without one a scheduler may skip the per-step calls."""
        return bool(self._window_freers or self._window_lockers)

    def release_window_lock(self, req: Req) -> None:
        """Releases the window part (SWA) of `req.lock` early, once the request's decode has
        left the cached prefix's window; the full lock stays, and the later unlock skips what
        was released. Does nothing before that, so a scheduler may call it every step."""
        self._receipts.release_window(req, self._window_lockers)

    # ------------------------------------------------------------------ sessions
    def open_session(self, session_id: str) -> None:
        """Opens a session (needs `CacheSettings.enable_session_cache`); a finished request
        with `req.session_id` then keeps its context covered until the next turn replaces it
        or `release_session` drops it (see `uniradix.sessions`)."""
        self.sessions.open_session(session_id)

    def release_session(self, session_id: str) -> SessionRelease:
        """Drops the session's coverage (its nodes become ordinary eviction candidates; nothing
        is freed); returns what it held. Idempotent."""
        return self.sessions.release_session(session_id)

    def path_indices(self, node: TreeNode) -> torch.Tensor:
        """Full-KV slots of the prefix ending at `node`, on the pool's device."""
        values = [n.data[0].value for n in self.tree.path_to_root(node)]
        values.reverse()
        return self.to_device(concat_values(values))

    def to_device(self, slots: Slots) -> torch.Tensor:
        """A tensor of `slots` on the pool's device (zero-copy on the CPU: never write to it)."""
        tensor = torch.from_numpy(slots)
        return tensor if self._on_cpu else tensor.to(self.device)

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Empties the tree and every pool (outstanding requests and receipts become void)."""
        self.tree.reset()
        self.tree.root.data[0].value = self._empty
        for c in self.components:
            c.reset()
        self.sessions.reset()
        self._receipts.clear()
        self.pools.reset()
        self.host_tier.reset()
        if self.event_sink is not None:
            self.event_sink.on_cleared()

    def pretty_print(self) -> str:
        text = format_tree(self)
        print(text)
        return text

    def check_invariants(self, held_by_requests: Mapping[str, int] | None = None) -> None:
        """Raises InvariantError listing every broken structural or accounting invariant.

        With `held_by_requests` (units per pool name held privately by running requests:
        "full" and "swa" KV slots, "mamba" state slots, "req" rows), also checks
        `free + evictable + protected + held == capacity` exactly per named pool.
        """
        raise_if_broken(self, held_by_requests)


__all__ = ["Req", "UnifiedRadixCache"]
