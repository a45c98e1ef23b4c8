"""SGLang's HiCache (host tier) on the uniradix core and on SGLang's Python core: SGLang's own
`UnifiedRadixCache` and `HybridCacheController` (CPU copies, see `sglang_hicache`) play the
same request stream on both, with device pressure (demotes of backed-up leaves, deletes of
the rest), host pressure (host-leaf eviction inside backups), write-through backups at
insert and load-backs of host hits; compared call by call, with the KV the load-backs bring
back checked against what the requests wrote, and the same final tree and KV events."""

from __future__ import annotations

import random
from array import array

import pytest

from tests.integrations.sglang_env import load_sglang

load_sglang(kits=True)

import torch  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType  # noqa: E402
from sglang.test.kits.unified_radix_cache.config import CONFIGS  # noqa: E402

from tests.integrations.sglang_hicache import (  # noqa: E402
    assert_same_events_on_both_cores,
    load_back,
    node_paths,
    prefetch_from_storage,
    run_hicache,
    settle_storage,
)
from tests.integrations.test_sglang_core import make_room  # noqa: E402

FULL = ComponentType.FULL
FULL_CONFIGS = [c for c in CONFIGS if c.components == (FULL,)]


def stream(page_size: int, n: int, seed: int):
    """Requests that come back: a past request extended (often evicted from the device by
    then: a host hit), or one of a few shared prefixes with a fresh tail; whole pages."""
    rng = random.Random(seed)
    pages = lambda k: [rng.randrange(1000) for _ in range(page_size * k)]  # noqa: E731
    prefixes = [pages(rng.randint(1, 4)) for _ in range(4)]
    past: list[list[int]] = []
    for _ in range(n):
        if past and rng.random() < 0.5:
            tokens = rng.choice(past) + pages(rng.randint(0, 2))
        else:
            tokens = rng.choice(prefixes) + pages(rng.randint(1, 3))
        past.append(tokens)
        yield tokens


def marker(tokens: list[int]) -> torch.Tensor:
    """What a request writes as the KV of its tokens (small integers: exact in bf16)."""
    return torch.tensor([t % 200 + 1 for t in tokens], dtype=torch.float32)


def key_buffer(allocator):
    kv = allocator.get_kvcache()
    return kv.get_key_buffer(kv.start_layer)


def play_hicache(
    cache, allocator, page_size: int, n: int, seed: int, l3: bool = False
) -> list[tuple]:
    """Match (loading host hits back), lock, allocate (evicting), write the KV, insert,
    unlock; the backups are submitted and acked every other request (as a scheduler step
    does), so some are still in flight when the next request splits or matches them.
    `l3`: an L3 storage backend is attached: what the match misses is prefetched from
    storage first, and every request ends with its backups, to the host and to storage,
    done (each core then meets the next request with the same store)."""
    host_pool = cache.cache_controller.mem_pool_host
    keys = key_buffer(allocator)
    trace = []
    for i, tokens in enumerate(stream(page_size, n, seed)):
        key = RadixKey(array("q", tokens))
        m = cache.match_prefix(MatchPrefixParams(key=key))
        fetched = 0
        if l3:
            fetched = prefetch_from_storage(cache, f"r{i}", m, tokens)
            m = cache.match_prefix(MatchPrefixParams(key=key))
        host_hit, loaded = m.host_hit_length, False
        if host_hit:
            loaded = load_back(cache, m.best_match_node)
            m = cache.match_prefix(MatchPrefixParams(key=key))
        prefix = cache.path_device_indices(m.last_device_node)[: m.device_prefix_len]
        # The KV on the device for the prefix is the one its requests wrote (load-backs too).
        kv_ok = torch.equal(keys[prefix][:, 0, 0].float(), marker(tokens[: len(prefix)]))
        lock = cache.inc_lock_ref(m.last_device_node)
        need = len(tokens) - m.device_prefix_len
        new, evicted = make_room(cache, allocator, need)
        if new is None:
            cache.dec_lock_ref(m.last_device_node, lock.to_dec_params())
            trace.append(("skip", m.device_prefix_len, host_hit))
            continue
        keys[new] = marker(tokens[m.device_prefix_len :])[:, None, None].to(keys.dtype)
        value = torch.cat([prefix, new])
        r = cache.insert(InsertParams(key=key, value=value, prev_prefix_len=m.device_prefix_len))
        cache.dec_lock_ref(m.last_device_node, lock.to_dec_params())
        if l3:
            settle_storage(cache)
        elif i % 2:  # the scheduler's per-step poll: submit the backups, reap their acks
            cache.check_hicache_events()
        cache.sanity_check()
        trace.append(
            (
                m.device_prefix_len,
                host_hit,
                loaded,
                kv_ok,
                prefix.tolist(),
                lock.delta,
                evicted,
                r.prefix_len,
                allocator.available_size(),
                host_pool.available_size(),
                cache.evictable_size(),
                cache.protected_size(),
                len(cache.ongoing_write_through),
                fetched,
                cache.tree_core.get_hash_values(m.last_device_node),
            )
        )
    return trace


def tree_state(cache) -> list[tuple]:
    """Every node's root path, with which tiers hold its KV and its host lock count."""
    core = cache.tree_core
    rows = [
        (
            path,
            core.get_component_device_value(node, FULL) is not None,
            core.get_component_host_value(node, FULL) is not None,
            core.get_component_host_lock_ref(node, FULL),
        )
        for node, path in node_paths(cache)
    ]
    return sorted(rows)


def run(cfg, core: str, write_policy: str, n: int, seed: int, **kwargs):
    def play(cache, allocator):
        return play_hicache(cache, allocator, cfg.page_size, n, seed)

    return run_hicache(cfg, core, write_policy, play, tree_state, **kwargs)


@pytest.mark.parametrize("write_policy", ["write_through", "write_through_selective", "write_back"])
@pytest.mark.parametrize("cfg", FULL_CONFIGS, ids=lambda c: c.label)
def test_hicache_plays_the_same_on_both_cores(cfg, write_policy):
    n = 300 if cfg.page_size == 1 else 120
    expected, expected_tree, _, python_core = run(cfg, "python", write_policy, n, seed=7)
    trace, tree, _, uniradix_core = run(cfg, "uniradix", write_policy, n, seed=7)
    assert (python_core, uniradix_core) == ("UnifiedTreeCoreInspector", "UniradixInspector")
    played = [s for s in expected if s[0] != "skip"]
    assert any(s[1] for s in played), "no host hit"
    assert any(s[2] for s in played), "no load-back"
    assert all(s[3] for s in played), "a prefix's KV is not what its requests wrote"
    assert any(s[6] for s in played), "no device eviction"
    assert any(not d and h for _, d, h, _ in expected_tree), "no host-only node"
    if cfg.page_size > 1 and write_policy != "write_through_selective":
        assert min(s[9] for s in played) == 0, "the host pool never filled"
    assert trace == expected
    assert tree == expected_tree


@pytest.mark.parametrize("cfg", FULL_CONFIGS[:2], ids=lambda c: c.label)
def test_hicache_kv_events_are_the_same_on_both_cores(cfg):
    """Device and host stores and removals (`medium` GPU / CPU), in the same order."""
    assert_same_events_on_both_cores(run, cfg, 200, 3)
