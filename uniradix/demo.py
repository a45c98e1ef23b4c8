"""`uniradix demo`: a few requests sharing prefixes, narrated call by call."""

from __future__ import annotations

from collections.abc import Callable

from uniradix.cache.checks import format_tree
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.config import CacheConfig
from uniradix.factory import build_cache
from uniradix.types import EvictParams, MatchPrefixParams, Req

SYSTEM_PROMPT = list(range(100, 116))
QUESTIONS = [[1, 2, 3, 4], [1, 2, 5, 6], [7, 8, 9, 10, 11, 12]]
UNRELATED = list(range(200, 212))


def _serve(cache: UnifiedRadixCache, tokens: list[int], say: Callable[[str], None]) -> None:
    pools = cache.pools
    match = cache.match_prefix(MatchPrefixParams(cache.make_key(tokens)))
    say(f"match  {len(tokens)} tokens -> {match.device_prefix_len} cached")
    req = Req(token_ids=tokens, req_pool_idx=pools.req_to_token_pool.alloc())
    assert req.req_pool_idx is not None
    req.lock = cache.inc_lock_ref(match.last_device_node)
    req.last_node = match.last_device_node
    say(f"lock   {req.lock.delta} tokens moved to protected (protected={cache.protected_size()})")
    pools.req_to_token_pool.write(req.req_pool_idx, 0, match.device_indices)
    req.cache_protected_len = match.device_prefix_len
    need = len(tokens) - match.device_prefix_len
    short = need - pools.kv_allocator.available_size()
    if short > 0:
        evicted = cache.evict(EvictParams(num_tokens=short)).num_tokens_evicted
        say(f"evict  {evicted} tokens to make room")
    slots = pools.kv_allocator.alloc(need)
    assert slots is not None
    pools.req_to_token_pool.write(req.req_pool_idx, match.device_prefix_len, slots)
    req.kv_committed_len = req.kv_allocated_len = len(tokens)
    cache.cache_finished_req(req)
    say(
        f"insert {need} new tokens; tree holds {cache.total_size()} "
        f"(evictable={cache.evictable_size()}, free slots={pools.kv_allocator.available_size()})"
    )
    cache.check_invariants({"full": 0})


def run_demo(say: Callable[[str], None] = print) -> UnifiedRadixCache:
    cache = build_cache(CacheConfig.of(full_tokens=32, max_context_len=64))
    for question in QUESTIONS:
        _serve(cache, SYSTEM_PROMPT + question, say)
    _serve(cache, UNRELATED, say)
    say("tree:\n" + format_tree(cache))
    return cache
