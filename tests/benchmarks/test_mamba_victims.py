"""`benchmarks.studies.mamba_victims`: the ghost list of its candidate order, the prefix digests
that name a state across its nodes, and the per-victim report on a cell."""

from benchmarks.hit_table import BUDGETS, sized
from benchmarks.studies.mamba_victims import (
    GHOST_STATES,
    GhostStates,
    Recorder,
    key_digest,
    prefix_digest,
    replay,
    report,
)
from benchmarks.traces.suite import suite
from tests.eviction.test_aux_eviction import holders, mamba_cache, put
from tests.eviction.test_flop_aware import node_at
from uniradix import EvictParams, MatchPrefixParams, RadixKey
from uniradix.components.mamba import MambaComponent
from uniradix.types import ComponentType


def order_of(cache: object) -> GhostStates:
    mamba = cache.component(ComponentType.MAMBA)  # type: ignore[attr-defined]
    assert isinstance(mamba, MambaComponent) and isinstance(mamba._credits, GhostStates)
    return mamba._credits


def test_a_resumed_state_gone_with_its_full_kv_comes_back_with_its_resumes() -> None:
    """A state at 4 resumed from twice, evicted with its leaf (full KV and all), is stored
    again: it starts with its two resumes, off probation; a fresh one-off state does not."""
    cache = mamba_cache(GHOST_STATES)
    put(cache, [1, 2, 3, 4])
    for _ in range(2):
        cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 5])))
    order = order_of(cache)
    assert order.reuse_evidence(node_at(cache, 4)) == 2
    assert cache.evict(EvictParams(num_tokens=4)).num_tokens_evicted == 4
    assert cache.tree.root.children == {}
    put(cache, [1, 2, 3, 4])
    put(cache, [7, 8, 9, 10, 11, 12])
    again, one_off = node_at(cache, 4), node_at(cache, 6)
    assert order.reuse_evidence(again) == 2 and not order.on_probation(again)
    assert order.reuse_evidence(one_off) == 0 and order.on_probation(one_off)
    cache.check_invariants()


def test_a_state_tombstoned_under_its_full_kv_leaves_no_ghost() -> None:
    """The tree keeps the node (its full KV) when only the state goes (its child is locked):
    no ghost is kept."""
    cache = mamba_cache(GHOST_STATES)
    put(cache, [1, 2, 3, 4])
    put(cache, [1, 2, 3, 4, 5, 6])
    lock = cache.inc_lock_ref(node_at(cache, 6))
    cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 9])))
    assert order_of(cache).reuse_evidence(node_at(cache, 4)) == 1
    assert cache.evict(EvictParams(mamba_num=1)).mamba_num_evicted == 1
    assert node_at(cache, 4).parent is not None and holders(cache) == [6]
    assert not order_of(cache)._ghosts
    cache.dec_lock_ref(node_at(cache, 6), lock)
    cache.check_invariants()


def test_prefix_and_key_digests_agree() -> None:
    cache = mamba_cache("reuse_credit")
    put(cache, [1, 2, 3, 4])
    put(cache, [1, 2, 3, 4, 5, 6])
    units = bytes(RadixKey([1, 2, 3, 4, 5, 6, 7]).units)
    for length in (4, 6):
        assert prefix_digest(cache.tree, node_at(cache, length)) == key_digest(None, units, length)
    assert key_digest(None, units, 4) != key_digest("other", units, 4)


def test_the_report_names_the_request_the_orders_differ_on() -> None:
    """On the issue's missed cell the default and LRU states differ by one request's hit."""
    trace = suite(only=["agentic_interfered/s1"])[0]
    options = sized(trace.options, *BUDGETS["tight"]).updated(config="hybrid")
    rec = Recorder()
    rec.install()
    runs = {order: replay(rec, options, order) for order in ("lru", "reuse_credit")}
    lines = report("cell", runs)
    assert "- 1 requests' hits differ; reuse_credit minus lru: -512 hit tokens" in lines
    assert any(line.startswith("- request ") for line in lines)
