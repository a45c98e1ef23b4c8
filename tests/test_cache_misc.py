"""Registry override, reset, pretty_print, KV pool and the demo command."""

import torch

from tests.helpers import insert_fresh, make_cache
from uniradix import ComponentType, MatchPrefixParams, RadixKey
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.cli import main
from uniradix.components.full import FullComponent
from uniradix.components.registry import COMPONENT_REGISTRY
from uniradix.memory.kv_pool import KVPool


class CountingFull(FullComponent):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.splits = 0

    def redistribute_on_split(self, parent, child, split_len):
        self.splits += 1
        super().redistribute_on_split(parent, child, split_len)


def test_registry_override_is_per_cache():
    base = make_cache()
    cache = UnifiedRadixCache(
        base.pools,
        base.settings,
        component_registry_override={ComponentType.FULL: CountingFull},
    )
    insert_fresh(cache, [1, 2, 3])
    cache.match_prefix(MatchPrefixParams(RadixKey([1, 9])))
    assert cache.components[0].splits == 1
    assert COMPONENT_REGISTRY[ComponentType.FULL] is FullComponent
    assert type(make_cache().components[0]) is FullComponent


def test_reset_empties_tree_and_pools():
    cache = make_cache()
    insert_fresh(cache, [1, 2, 3])
    cache.inc_lock_ref(cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3]))).last_device_node)
    cache.reset()
    assert cache.total_size() == 0 and cache.pools.kv_allocator.available_size() == 64
    assert cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3]))).device_prefix_len == 0
    cache.check_invariants({"full": 0})


def test_pretty_print_shows_keys_slots_and_locks(capsys):
    cache = make_cache()
    insert_fresh(cache, [1, 2, 3])
    text = cache.pretty_print()
    assert "[1, 2, 3] (3) full=[1, 2, 3] lock=0" in text
    assert text in capsys.readouterr().out


def test_kv_pool_reads_back_what_was_written():
    pool = KVPool(num_slots=8, num_layers=2, num_kv_heads=2, head_dim=4)
    slots = torch.tensor([3, 5])
    k, v = torch.randn(2, 2, 4), torch.randn(2, 2, 4)
    pool.set_kv(1, slots, k, v)
    got_k, got_v = pool.get_kv(1, slots)
    assert torch.equal(got_k, k) and torch.equal(got_v, v)
    assert pool.size_bytes() == 2 * 2 * 8 * 2 * 4 * 4
    assert KVPool(num_slots=8).size_bytes() == 0


def test_demo_narrates_match_lock_insert_and_evict(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "match  20 tokens -> 18 cached" in out
    assert "evict" in out and "tree:" in out
