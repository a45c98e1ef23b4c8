"""Chunked prefill through cache_unfinished_req / cache_finished_req, and reuse."""

import pytest

from tests.driver import MiniScheduler
from tests.helpers import make_cache
from uniradix import MatchPrefixParams, RadixKey


@pytest.mark.parametrize("page_size", [1, 4])
def test_chunked_prefill_then_finish_then_reuse(page_size):
    cache = make_cache(full_tokens=64, page_size=page_size)
    sched = MiniScheduler(cache)
    prompt = list(range(10, 30))  # 20 tokens
    req = sched.admit(prompt)
    assert req.cache_protected_len == 0
    assert sched.chunk(req, 8)
    assert req.cache_protected_len == 8 and cache.protected_size() == 8
    assert req.lock.node is req.last_node and req.last_node.num_tokens == 8
    sched.check()
    assert sched.chunk(req, 12)
    assert req.cache_protected_len == 20 - 20 % page_size
    first_slots = cache.pools.req_to_token_pool.read(req.req_pool_idx, 0, 20).clone()
    sched.check()
    sched.finish(req)
    assert cache.protected_size() == 0 and cache.total_size() == 20 - 20 % page_size
    sched.check()

    again = sched.admit(prompt + [99, 98])
    hit = len(prompt) // page_size * page_size
    assert again.cache_protected_len == hit
    row = cache.pools.req_to_token_pool.read(again.req_pool_idx, 0, hit)
    assert row.tolist() == first_slots[:hit].tolist()
    assert sched.chunk(again, len(again.token_ids) - hit)
    sched.check()
    sched.finish(again)
    sched.check()
    m = cache.match_prefix(MatchPrefixParams(RadixKey(prompt + [99, 98])))
    assert m.device_prefix_len == 22 - 22 % page_size


def test_concurrent_requests_computing_the_same_prefix_free_the_duplicate():
    cache = make_cache(full_tokens=32)
    sched = MiniScheduler(cache)
    a, b = sched.admit([1, 2, 3, 4, 5]), sched.admit([1, 2, 3, 4, 6])
    assert sched.extend(a, 5) and sched.extend(b, 5)
    assert cache.pools.kv_allocator.available_size() == 22
    sched.finish(a)
    sched.check()
    sched.finish(b)  # b's copies of [1, 2, 3, 4] are duplicates: freed
    sched.check()
    assert cache.total_size() == 6 and cache.pools.kv_allocator.available_size() == 26


def test_finish_without_insert_frees_everything_it_owned():
    cache = make_cache(full_tokens=32)
    sched = MiniScheduler(cache)
    req = sched.admit(list(range(8)))
    assert sched.chunk(req, 4) and sched.extend(req, 4)
    sched.finish(req, is_insert=False)
    sched.check()
    assert cache.total_size() == 4 and cache.pools.kv_allocator.available_size() == 28
    assert cache.pools.req_to_token_pool.available_size() == cache.pools.req_to_token_pool.size
