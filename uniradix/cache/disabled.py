"""DisabledRadixCache: prefix caching turned off, behind the same API.

A scheduler written for `UnifiedRadixCache` runs unchanged on it (no `if cache_disabled:`):

- `match_prefix` matches nothing (the root, length 0); with Mamba it still gives the request
  its fresh state slots, as admission expects;
- `insert` keeps nothing and frees every slot it is given (the caller's `value` past
  `prev_prefix_len`, and the Mamba state slot);
- `cache_unfinished_req` publishes nothing: the request keeps its row and slots;
- `cache_finished_req` frees the request's slots, row and Mamba slots;
- `evict` finds nothing to evict; sizes are 0; locks are anchored at the root.

Build it with `CacheConfig.of(disable_radix_cache=True)`.
"""

from __future__ import annotations

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.cache.insert_slots import checked_value
from uniradix.memory.allocator import to_numpy
from uniradix.types import (
    FreeKind,
    FreeSlots,
    InsertParams,
    InsertResult,
    MatchPrefixParams,
    MatchResult,
    Req,
)


class DisabledRadixCache(UnifiedRadixCache):
    def match_prefix(self, params: MatchPrefixParams) -> MatchResult:
        self._aligned_len(params.key)  # the same checks of the key as a real match
        result = MatchResult(self.to_device(self._empty), 0, self.tree.root, 0)
        self.mamba_requests.after_match(params, result)
        return result

    def insert(self, params: InsertParams) -> InsertResult:
        value = checked_value(params, self.page_size)
        if not 0 <= params.prev_prefix_len <= len(params.key):
            raise ValueError(
                f"prev_prefix_len={params.prev_prefix_len} outside [0, {len(params.key)}]"
            )
        actions = [FreeSlots(FreeKind.KV, value[params.prev_prefix_len :].copy())]
        if params.mamba_value is not None:
            actions.append(FreeSlots(FreeKind.MAMBA, to_numpy(params.mamba_value)))
        for name, extra in (params.extra_values or {}).items():
            actions.append(FreeSlots(name, to_numpy(extra)))
        self.apply(actions)
        return InsertResult(0, self.tree.root)

    def cache_unfinished_req(self, req: Req, chunked: bool = False) -> None:
        if req.req_pool_idx is None:
            raise ValueError("request has no req_pool_idx (never admitted, or already finished)")
        # Nothing is published, so tracked Mamba states are not checkpointed either.
        req.mamba_last_track_seqlen = None

    def cache_finished_req(self, req: Req, is_insert: bool = True) -> None:
        super().cache_finished_req(req, is_insert=False)
