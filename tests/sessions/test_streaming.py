"""Streaming sessions: a finished turn's row is held for the next turn (overshoot trimmed),
resumed without a match, and released exactly once (SWA slots included)."""

from __future__ import annotations

import pytest

from uniradix import CacheConfig, MatchPrefixParams, Req, build_cache
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.sessions import SessionCache
from uniradix.sessions.streaming import StreamingSessions


def make(page_size: int = 1, swa: bool = False) -> UnifiedRadixCache:
    return build_cache(
        CacheConfig.of(
            full_tokens=64,
            page_size=page_size,
            max_context_len=64,
            max_running_requests=4,
            sliding_window=4 if swa else None,
            swa_tokens=64 if swa else None,
            enable_session_cache=True,
        )
    )


def run_turn(cache: UnifiedRadixCache, tokens: list[int], allocate: int, sid: str = "s") -> Req:
    """Admits `tokens`, computes all but the last and allocates `allocate` slots in all."""
    row = cache.pools.req_to_token_pool.alloc()
    assert row is not None
    req = Req(token_ids=list(tokens), req_pool_idx=row, session_id=sid)
    match = cache.match_prefix(MatchPrefixParams(cache.make_key(tokens[:-1]), req=req))
    req.lock, req.last_node = cache.inc_lock_ref(match.last_device_node), match.last_device_node
    cache.pools.req_to_token_pool.write(row, 0, match.device_indices)
    req.cache_protected_len = req.kv_allocated_len = match.device_prefix_len
    extend(cache, req, len(tokens) - 1, allocate)
    return req


def extend(cache: UnifiedRadixCache, req: Req, committed: int, allocate: int) -> None:
    slots = cache.pools.kv_allocator.alloc(allocate - req.kv_allocated_len)
    assert slots is not None and req.req_pool_idx is not None
    cache.pools.req_to_token_pool.write(req.req_pool_idx, req.kv_allocated_len, slots)
    req.kv_allocated_len, req.kv_committed_len = allocate, committed


def check(cache: UnifiedRadixCache, streaming: StreamingSessions) -> None:
    cache.check_invariants(streaming.held_by_requests())


def test_hold_trims_the_overshoot_and_resume_continues_the_row() -> None:
    cache = make(page_size=4)
    streaming = StreamingSessions(cache)
    req = run_turn(cache, list(range(11)), allocate=20)  # 10 computed, 20 allocated
    free = cache.pools.kv_allocator.available_size()
    streaming.hold(req)
    assert (req.kv_committed_len, req.kv_allocated_len) == (10, 12)  # pages past 12 freed
    assert cache.pools.kv_allocator.available_size() == free + 8
    assert streaming.trimmed_tokens == 8
    check(cache, streaming)
    nxt = streaming.resume("s", [*range(11), 50, 51, 52])
    assert nxt is req and "s" not in streaming
    extend(cache, nxt, 13, 16)  # only the new tokens are computed
    cache.cache_finished_req(nxt)
    check(cache, streaming)
    hit = cache.match_prefix(MatchPrefixParams(cache.make_key([*range(11), 50, 51])))
    assert hit.device_prefix_len == 12
    assert isinstance(cache.sessions, SessionCache) and cache.sessions.is_covered(
        hit.last_device_node
    )


def test_release_frees_the_held_turn_exactly_once_swa_included() -> None:
    cache = make(swa=True)
    streaming = StreamingSessions(cache)
    capacities = cache.pools.capacities()
    req = run_turn(cache, list(range(20)), allocate=20)
    assert cache.free_out_of_window_slots(req) > 0  # SWA below the window already freed
    streaming.hold(req)
    check(cache, streaming)
    assert streaming.trimmed_tokens == 1  # the slot allocated for the last token
    released = streaming.release_session("s")
    assert released.streaming_tokens == 19
    assert cache.pools.available() == capacities  # every full, SWA slot and the row back
    assert streaming.release_session("s").streaming_tokens == 0  # nothing freed twice
    assert cache.pools.available() == capacities
    cache.check_invariants({"full": 0, "swa": 0, "req": 0})


def test_resume_with_other_tokens_releases_the_held_turn() -> None:
    cache = make()
    streaming = StreamingSessions(cache)
    streaming.hold(run_turn(cache, list(range(8)), allocate=7))
    assert streaming.resume("s", [9, 9, 9, 9, 9, 9, 9, 9, 9]) is None
    assert "s" not in streaming
    assert cache.pools.available() == cache.pools.capacities()
    assert streaming.resume("other", [1]) is None


def test_hold_rejects_bad_requests() -> None:
    cache = make()
    streaming = StreamingSessions(cache)
    req = run_turn(cache, list(range(8)), allocate=7)
    req.session_id = None
    with pytest.raises(ValueError, match="no session_id"):
        streaming.hold(req)
    req.session_id = "s"
    streaming.hold(req)
    again = run_turn(cache, list(range(30, 38)), allocate=7)
    with pytest.raises(ValueError, match="already holds"):
        streaming.hold(again)
    cache.cache_finished_req(again)
    streaming.release_session("s")
    cache.check_invariants({"full": 0, "req": 0})
