"""The cache on each device: pools and results live on the pool's device."""

import torch

from tests.driver import MiniScheduler
from uniradix import CacheConfig, MatchPrefixParams, build_cache


def test_request_flow_and_results_on_the_pool_device(device):
    cache = build_cache(
        CacheConfig.of(
            full_tokens=64, page_size=4, max_context_len=64, device=device, num_full_layers=1
        )
    )
    sched = MiniScheduler(cache)
    req = sched.admit(list(range(1, 14)))
    assert sched.chunk(req, 13)
    sched.finish(req)
    sched.check()
    m = cache.match_prefix(MatchPrefixParams(cache.make_key(list(range(1, 14)))))
    assert m.device_prefix_len == 12
    assert m.device_indices.device.type == torch.device(device).type
    assert m.device_indices.tolist() == list(range(4, 16))
    assert cache.pools.kv_pool.k_buffers[0].device.type == torch.device(device).type
    assert cache.pools.req_to_token_pool.req_to_token.device.type == torch.device(device).type
