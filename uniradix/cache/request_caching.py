"""Request caching: how a running or finished request's KV enters the tree and its row.

The bodies of `UnifiedRadixCache.cache_unfinished_req` and `cache_finished_req`, kept apart
from the controller; they use only the cache's public methods and its pools.

Row layout of a request (`req_to_token[row]`)::

    [0, cache_protected_len)                tree's slots, kept alive by `req.lock`
    [cache_protected_len, kv_allocated_len) the request's own slots (computed up to
                                            kv_committed_len); with SWA, own positions below
                                            `swa_evicted_seqlen` have lost their SWA slots
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from uniradix.cache.paths import path_tail
from uniradix.key import GrowingKey, RadixKey
from uniradix.types import FreeSlots, InsertParams, InsertResult, Req

if TYPE_CHECKING:
    from uniradix.cache.view import ControllerView


def cache_unfinished_req(cache: ControllerView, req: Req) -> None:
    row = _checked_row(req)
    result = _insert_req(cache, req, row, _key(cache, req), finished=False)
    protected = req.cache_protected_len
    tail, end = path_tail(result.last_device_node, protected)
    cache.pools.req_to_token_pool.write(row, protected, cache.to_device(tail))
    if req.lock is not None:
        cache.dec_lock_ref(req.lock.node, req.lock)
    req.lock = cache.inc_lock_ref(result.last_device_node)
    req.last_node = result.last_device_node
    req.cache_protected_len = end


def cache_finished_req(cache: ControllerView, req: Req, is_insert: bool) -> None:
    row = _checked_row(req)
    owned_from = req.cache_protected_len
    if is_insert:
        result = _insert_req(cache, req, row, _key(cache, req), finished=True)
        owned_from = cache.tree.prefix_len(result.last_device_node)
        cache.sessions.register(req.session_id, result.last_device_node)
    tail = cache.pools.req_to_token_pool.host_read(row, owned_from, req.kv_allocated_len)
    if tail.shape[0]:
        cache.pools.kv_allocator.free(tail)
    if req.lock is not None:
        cache.dec_lock_ref(req.lock.node, req.lock)
    cache.pools.req_to_token_pool.free(row)
    cache.mamba_requests.release(req)
    req.lock = None
    req.last_node = None
    req.req_pool_idx = None
    req.cache_protected_len = 0
    req.kv_allocated_len = req.kv_committed_len = 0
    req.swa_evicted_seqlen = 0
    req.packed_key = None


def free_out_of_window_slots(cache: ControllerView, req: Req) -> int:
    if req.req_pool_idx is None:
        raise ValueError("request has no req_pool_idx (never admitted, or already finished)")
    if not cache._window_freers:
        return 0
    row = cache.pools.req_to_token_pool.host_read(req.req_pool_idx, 0, req.kv_committed_len)
    actions: list[FreeSlots] = []
    freed = 0
    for c in cache._window_freers:  # a loop: called per request per step
        freed += c.free_out_of_window(req, row, actions)
    if actions:  # most steps free nothing (the window moves a page at a time)
        cache.apply(actions)
    return freed


def _checked_row(req: Req) -> int:
    if req.req_pool_idx is None:
        raise ValueError("request has no req_pool_idx (never admitted, or already finished)")
    if not 0 <= req.cache_protected_len <= req.kv_committed_len <= req.kv_allocated_len:
        raise ValueError(
            "request lengths must satisfy 0 <= cache_protected_len <= kv_committed_len <= "
            f"kv_allocated_len, got {req.cache_protected_len}, {req.kv_committed_len}, "
            f"{req.kv_allocated_len}"
        )
    if req.kv_committed_len > len(req.token_ids):
        raise ValueError(f"kv_committed_len={req.kv_committed_len} > {len(req.token_ids)} tokens")
    return req.req_pool_idx


def _key(cache: ControllerView, req: Req) -> RadixKey:
    """The page-aligned key of the request's computed tokens (built only to insert: a
    request dropped without caching needs none), grown from the one of its last chunk.

    When the request's lock holds the node ending its cached prefix, the key names that node
    instead of holding the prefix (a `PathTailKey`): the insert then copies and compares only
    what the request added since, whatever the prompt's length."""
    grown, is_bigram = req.packed_key, cache.settings.is_eagle
    if grown is None or grown.extra_key != (req.extra_key or None) or grown.is_bigram != is_bigram:
        grown = req.packed_key = GrowingKey(req.extra_key, is_bigram)
    anchor, start = req.last_node, req.cache_protected_len
    if (
        start
        and anchor is not None
        and req.lock is not None
        and req.lock.node is anchor
        and cache.tree.prefix_len(anchor) == start
    ):
        key: RadixKey = grown.tail(req.token_ids, req.kv_committed_len, anchor, start)
    else:
        key = grown.key(req.token_ids, req.kv_committed_len)
    return key.page_aligned(cache.page_size)


def _insert_req(
    cache: ControllerView, req: Req, row: int, key: RadixKey, finished: bool
) -> InsertResult:
    key, mamba_value = cache.mamba_requests.prepare_caching(req, key, finished)
    values = cache.pools.req_to_token_pool.read(row, 0, len(key))
    result = cache.insert(
        InsertParams(
            key,
            values,
            prev_prefix_len=req.cache_protected_len,
            inserted_len=req.cache_inserted_len,
            priority=req.priority,
            swa_evicted_seqlen=req.swa_evicted_seqlen,
            mamba_value=mamba_value,
            checkpoint_seqlens=req.checkpoint_seqlens,
        )
    )
    cache.mamba_requests.after_caching(req, mamba_value, result, finished)
    req.cache_inserted_len = max(req.cache_inserted_len, len(key))
    return result
