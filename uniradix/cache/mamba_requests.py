"""The controller's Mamba request steps: giving requests their state slots, copy-on-write at
match, checkpointing into the tree, and giving slots back. Kept apart from `controller.py`, which
calls these steps at fixed points; a cache without a Mamba component uses the null object
`NoMambaRequests`, whose steps do nothing.

How a scheduler uses Mamba slots (full+Mamba and full+SWA+Mamba caches)
-----------------------------------------------------------------------
1. **Admission.** Match with the request: `r = cache.match_prefix(MatchPrefixParams(key,
   req=req))`. The cache gives the request its slots unless it has them: the working slot
   `req.mamba_pool_idx` and, in extra-buffer mode, two empty ping-pong tracking entries
   `req.mamba_ping_pong` (a tracking slot is taken only when a track is written). It then
   fills the working slot with a *copy* of the state cached at `r.last_device_node` (zeros
   when nothing matched). The cached state itself is never
   written, so any number of requests may resume from it. When the pool is short the cache
   first evicts Mamba states (with the matched node locked); if it still cannot, it leaves
   `req.mamba_pool_idx` None: do not admit the request now. A request matched but never
   admitted gives its slots back with `cache.release_req_slots(req)`. Matching an admitted
   request again would overwrite its working state: don't.
2. **Branching.** `r.mamba_branching_seqlen`, when set, is a checkpoint-grid position past
   the usable match where the tree holds full KV but no state: a branch starts there. End the
   first prefill chunk exactly at that length, so that the `cache_unfinished_req` after it
   stores a state there and the next request sharing the prefix resumes from it.
3. **Forward passes.** Mamba layers read and update the working slot in place; after a pass
   it holds the state after `token_ids[:kv_committed_len]`. In extra-buffer mode (required
   for page_size > 1), a pass over `token_ids[start:end]` also *tracks* the state at
   `s = checkpoint_seqlen(start, end)` when that is not None: the runner copies the state
   after `token_ids[:s]` into `track_slot(req)` (skipping the copy when it is None: no slot
   to be had) and calls `commit_track(req, s)`, which gives back the superseded track's
   slot. So between passes a request holds its working slot and at most one tracking slot.
4. **After each prefill chunk**, `cache.cache_unfinished_req(req)` publishes a checkpoint:
   without extra buffer, the prefix `token_ids[:kv_committed_len]` with a copy of the working
   state in a fresh slot; with it, the prefix up to the last tracked position with the
   tracked slot itself (its entry is left empty; any other tracked slot is given back).
   Nothing new to publish: the full KV is still published, without a state.
5. **Finish.** `cache.cache_finished_req(req)` donates the working slot (extra buffer: the
   last tracked slot) to the tree as the state of the published prefix and frees the
   request's other slots; `is_insert=False` frees them all. A slot the tree already had a
   state for is freed (`InsertResult.mamba_exist`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from uniradix.components.mamba import MambaComponent
from uniradix.key import RadixKey
from uniradix.memory.mamba_pool import MambaReqPool
from uniradix.tree.node import TreeNode
from uniradix.types import ComponentType, EvictParams, InsertResult, MatchPrefixParams, Req

if TYPE_CHECKING:
    from uniradix.tiers.views import CacheView
    from uniradix.types import MatchResult


class NoMambaRequests:
    """Request steps of a cache without Mamba: nothing to allocate, copy or free."""

    def after_match(self, params: MatchPrefixParams, result: MatchResult) -> None:
        return

    def prepare_caching(
        self, req: Req, key: RadixKey, finished: bool
    ) -> tuple[RadixKey, torch.Tensor | None]:
        """(the prefix of `key` to publish, the state slot to publish with it)."""
        return key, None

    def after_caching(
        self, req: Req, mamba_value: torch.Tensor | None, result: InsertResult, finished: bool
    ) -> None:
        return

    def release(self, req: Req) -> None:
        return


class MambaRequests(NoMambaRequests):
    def __init__(self, cache: CacheView) -> None:
        pool = cache.pools.mamba
        if pool is None:
            raise ValueError("a cache with a Mamba component needs CachePools.mamba")
        if cache.page_size > 1 and not pool.extra_buffer:
            raise ValueError(
                f"page_size={cache.page_size} with Mamba needs the extra buffer (ping-pong "
                "tracking): a state can only be checkpointed on a page boundary"
            )
        component = cache.component(ComponentType.MAMBA)
        if not isinstance(component, MambaComponent):
            raise TypeError(f"Mamba requests need a MambaComponent, got {type(component)}")
        self.cache = cache
        self.pool: MambaReqPool = pool
        self.component = component

    # ------------------------------------------------------------------ runner side
    def checkpoint_seqlen(self, start: int, end: int) -> int | None:
        """The last checkpoint-grid position in `(start, end]`: where a forward pass over
        `token_ids[start:end]` tracks the state (extra-buffer mode), or None."""
        grid = self.component.checkpoint_grid
        s = end // grid * grid
        return s if s > start else None

    def track_slot(self, req: Req) -> int | None:
        """The slot to write the next tracked state into, taken now (evicting a cached state
        if the pool is short); None when no slot can be had: skip the track, the request
        then publishes no state there."""
        slot = self.pool.track_slot(req)
        if slot is None:
            slot = self._alloc_slot()
            if slot is not None:
                self.pool.set_track_slot(req, slot)
        return slot

    def commit_track(self, req: Req, seqlen: int) -> None:
        """`track_slot(req)` now holds the state after `token_ids[:seqlen]` (nothing happens
        when it gave no slot)."""
        grid = self.component.checkpoint_grid
        if not isinstance(seqlen, int) or seqlen <= 0 or seqlen % grid:
            raise ValueError(
                f"commit_track: seqlen={seqlen!r} is not a positive multiple of {grid}"
            )
        if self.track_slot(req) is not None:
            self.pool.commit_track(req, seqlen)

    # ------------------------------------------------------------------ cache steps
    def after_match(self, params: MatchPrefixParams, result: MatchResult) -> None:
        """Copy-on-write: the request's working slot gets a copy of the matched state."""
        req = params.req
        if req is None:
            return
        anchor = result.last_device_node
        self._make_room(self.pool.missing_slots(req), anchor)
        if not self.pool.alloc_req(req):
            return
        assert req.mamba_pool_idx is not None
        req.mamba_last_track_seqlen = None
        src = self.component.slot(anchor)
        if src is None:
            self.pool.states.clear(req.mamba_pool_idx)
        else:
            self.pool.states.copy(src, req.mamba_pool_idx)

    def prepare_caching(
        self, req: Req, key: RadixKey, finished: bool
    ) -> tuple[RadixKey, torch.Tensor | None]:
        """Chooses the prefix to publish and the slot holding its state, detached from the
        request (see the module docstring, steps 4 and 5)."""
        if req.mamba_pool_idx is None:
            raise ValueError("request has no Mamba slot: pass req= to match_prefix at admission")
        protected, pool = req.cache_protected_len, self.pool
        if not pool.extra_buffer:
            if len(key) <= protected:
                return key, None
            if finished:
                slot: int | None = req.mamba_pool_idx
                pool.free_req(req, keep=slot)
            else:
                slot = self._alloc_slot()
                if slot is not None:
                    pool.states.copy(req.mamba_pool_idx, slot)
            return key, None if slot is None else self._value(slot)
        entry = pool.tracked_entry(req, len(key))
        if entry is None or entry[1] <= protected:
            return key[:protected], None
        idx, seqlen = entry
        if seqlen % self.cache.page_size:
            raise ValueError(f"tracked seqlen={seqlen} is not page aligned")
        ping_pong = pool.track_slots(req)
        slot = ping_pong[idx]
        assert slot is not None  # a committed entry holds its slot until published
        if finished:
            pool.free_req(req, keep=slot)
        else:
            ping_pong[idx] = None  # the tree owns it now
        return key[:seqlen], self._value(slot)

    def after_caching(
        self, req: Req, mamba_value: torch.Tensor | None, result: InsertResult, finished: bool
    ) -> None:
        if mamba_value is not None and result.mamba_exist:
            self.pool.allocator.free(mamba_value)
        elif mamba_value is not None and finished:
            self.component.note_finish_state(result.last_device_node)
        if not finished:
            # A publish forgets the tracked states: any still held is below the published
            # prefix (or was not published) and would never be used, so its slot goes back.
            req.mamba_last_track_seqlen = None
            if req.mamba_ping_pong is not None:
                for idx in range(len(req.mamba_ping_pong)):
                    self.pool.drop_track(req, idx)

    def release(self, req: Req) -> None:
        self.pool.free_req(req)

    # ------------------------------------------------------------------ slots
    def _make_room(self, num_slots: int, anchor: TreeNode | None = None) -> None:
        """Evicts Mamba states until `num_slots` are free (best effort); `anchor`'s state
        and path stay locked meanwhile, so a copy source survives."""
        short = num_slots - self.pool.allocator.available_size()
        if short <= 0:
            return
        receipt = None if anchor is None else self.cache.inc_lock_ref(anchor)
        self.cache.evict(EvictParams(mamba_num=short))
        if receipt is not None:
            self.cache.dec_lock_ref(receipt.node, receipt)

    def _alloc_slot(self) -> int | None:
        self._make_room(1)
        return self.pool.allocator.alloc_one()

    def _value(self, slot: int) -> torch.Tensor:
        return torch.tensor([slot], dtype=torch.int64, device=self.pool.allocator.device)
