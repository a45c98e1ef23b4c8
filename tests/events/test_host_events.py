"""KV events with a host tier: exact hashes for backup acks, demotion, revival, load-back
and host eviction on both media, and random traffic (acks delayed and reordered, every write
policy) after which the index fed the encoded stream equals the cache's content per medium."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.driver import MiniScheduler
from tests.events.oracle import StrictStream, cached_hashes
from tests.events.test_scenarios import GOLDEN
from tests.helpers import insert_fresh
from tests.tiers.builders import host_cache
from tests.tiers.test_property_host_full import apply_op, op
from uniradix import EvictParams, MatchPrefixParams, RadixKey
from uniradix.events import BlockRemoved, BlockStored, encode_batch
from uniradix.events.index import KVEventIndex
from uniradix.events.recorder import EventRecorder

TOKENS = [10, 20, 30, 40, 50, 60, 70, 80]  # GOLDEN's pages, in pages of 2


def stored(medium: str) -> BlockStored:
    return BlockStored(
        GOLDEN, None, TOKENS, 2, None, medium, None, group_idx=0,
        kv_cache_spec_kind="full_attention",
    )  # fmt: skip


def removed(medium: str) -> BlockRemoved:
    return BlockRemoved(GOLDEN[::-1], medium, group_idx=0)


def attached(write_policy: str):  # type: ignore[no-untyped-def]
    cache, tier, engine = host_cache(16, 32, 2, write_policy)
    recorder = EventRecorder(cache)
    cache.set_event_sink(recorder)
    return cache, tier, engine, recorder


def load_back(cache, tier) -> None:  # type: ignore[no-untyped-def]
    m = cache.match_prefix(MatchPrefixParams(RadixKey(TOKENS)))
    assert m.host_hit_length == 8
    assert tier.load_back(m).device_prefix_len == 8


def test_write_through_backup_ack_demotion_load_back_and_host_eviction() -> None:
    cache, tier, engine, recorder = attached("write_through")
    insert_fresh(cache, TOKENS)
    assert recorder.take_events() == [stored("GPU")]  # the backup is in flight: no host store
    engine.release(1)
    tier.writing_check()
    assert recorder.take_events() == [stored("CPU_PINNED")]
    assert cache.evict(EvictParams(num_tokens=8)).num_tokens_evicted == 8  # demoted
    assert recorder.take_events() == [removed("GPU")]
    load_back(cache, tier)  # announced at submit: the tree holds the device slots
    assert recorder.take_events() == [stored("GPU")]
    tier.wait_loads()
    assert recorder.take_events() == []
    cache.evict(EvictParams(num_tokens=8))
    assert tier.evict_host(8) == 8
    assert recorder.take_events() == [removed("GPU"), removed("CPU_PINNED")]
    assert not cache.tree.root.children


def test_an_insert_over_a_demoted_node_revives_it_on_the_device() -> None:
    cache, tier, _, recorder = attached("write_through")
    insert_fresh(cache, TOKENS)
    tier.drain()
    cache.evict(EvictParams(num_tokens=8))
    recorder.take_events()
    insert_fresh(cache, TOKENS)  # recomputed: the fresh slots revive the host-only node
    assert recorder.take_events() == [stored("GPU")]
    cache.evict(EvictParams(num_tokens=8))
    assert recorder.take_events() == [removed("GPU")]  # demoted again: the host copy stays


def test_write_back_backs_up_at_eviction_and_drops_the_host_copy_after_a_load_back() -> None:
    cache, tier, _, recorder = attached("write_back")
    insert_fresh(cache, TOKENS)
    assert recorder.take_events() == [stored("GPU")]
    cache.evict(EvictParams(num_tokens=8))
    assert recorder.take_events() == [stored("CPU_PINNED"), removed("GPU")]
    load_back(cache, tier)
    assert recorder.take_events() == [stored("GPU")]
    tier.wait_loads()  # landed: write-back keeps one copy
    assert recorder.take_events() == [removed("CPU_PINNED")]
    tier.evict_host(8)  # nothing on the host any more
    cache.evict(EvictParams(num_tokens=8))  # backed up again, demoted
    assert recorder.take_events() == [stored("CPU_PINNED"), removed("GPU")]


def test_a_failed_backup_is_never_published() -> None:
    cache, tier, engine, recorder = attached("write_through")
    insert_fresh(cache, TOKENS)
    engine.failing.add(1)
    engine.release(1)
    tier.writing_check()
    assert recorder.take_events() == [stored("GPU")]
    assert cache.evict(EvictParams(num_tokens=8)).num_tokens_evicted == 8  # lost, not demoted
    assert recorder.take_events() == [removed("GPU")]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    page_size=st.sampled_from([1, 2, 4]),
    write_policy=st.sampled_from(["write_through", "write_through_selective", "write_back"]),
    host_tokens=st.sampled_from([16, 64]),
    wire=st.sampled_from(["map", "vllm-array", "sglang-array"]),
    ops=st.lists(op, min_size=1, max_size=30),
)
def test_index_equals_the_content_of_both_media_under_reordered_acks(  # type: ignore[no-untyped-def]
    page_size, write_policy, host_tokens, wire, ops
) -> None:
    cache, tier, engine = host_cache(48, host_tokens, page_size, write_policy)
    recorder = EventRecorder(cache)
    cache.set_event_sink(recorder)
    index, strict, sched = KVEventIndex(page_size), StrictStream(page_size), MiniScheduler(cache)
    seq = 0

    def check() -> None:
        nonlocal seq
        events = recorder.take_events()
        strict.apply(events)
        index.apply("a", encode_batch(events, 0.0, 0, wire), seq)
        seq += 1
        for medium in ("GPU", "CPU_PINNED"):
            assert index.blocks("a", medium) == cached_hashes(cache, medium), medium
            assert set(strict.held.get(medium, {})) == cached_hashes(cache, medium), medium
        assert index.stats.orphan_stores == 0

    for name, a, b in ops:
        apply_op(sched, cache, tier, engine, name, a, b)
        check()
    for req in list(sched.running):
        sched.finish(req)
    tier.drain()
    cache.evict(EvictParams(num_tokens=cache.evictable_size()))
    tier.evict_host(tier.full.host_tokens)
    check()
    assert index.blocks("a") == index.blocks("a", "CPU_PINNED") == set()
