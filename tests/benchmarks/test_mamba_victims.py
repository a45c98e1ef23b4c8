"""`benchmarks.studies.mamba_victims`: its comparison orders, the digests that name a state
across its nodes, and the per-victim report on issue 28's cell."""

from benchmarks.hit_table import BUDGETS, sized
from benchmarks.studies.mamba_victims import (
    GHOST_RESUMES,
    NO_GHOSTS,
    Recorder,
    key_digest,
    replay,
    report,
)
from benchmarks.traces.suite import suite
from tests.eviction.test_aux_eviction import mamba_cache, put
from tests.eviction.test_flop_aware import node_at
from tests.eviction.test_mamba_probation import probation_of
from uniradix import EvictParams, MatchPrefixParams, RadixKey
from uniradix.eviction.mamba_ghosts import prefix_digest


def gone_and_stored_again(order: str) -> tuple[int, bool]:
    """A state at 4 resumed from twice leaves the tree with its full KV and is stored again:
    (its reuse evidence, whether it is on probation)."""
    cache = mamba_cache(order)
    put(cache, [1, 2, 3, 4])
    for _ in range(2):
        cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 5])))
    assert cache.evict(EvictParams(num_tokens=4)).num_tokens_evicted == 4
    put(cache, [1, 2, 3, 4])
    cache.check_invariants()
    o = probation_of(cache)
    return o.reuse_evidence(node_at(cache, 4)), o.on_probation(node_at(cache, 4))


def test_the_comparison_orders_forget_or_restore_a_returned_states_resumes() -> None:
    assert gone_and_stored_again(NO_GHOSTS) == (0, True)
    assert gone_and_stored_again(GHOST_RESUMES) == (2, False)
    assert gone_and_stored_again("reuse_credit") == (0, False)


def test_prefix_and_key_digests_agree() -> None:
    cache = mamba_cache("reuse_credit")
    put(cache, [1, 2, 3, 4])
    put(cache, [1, 2, 3, 4, 5, 6])
    units = bytes(RadixKey([1, 2, 3, 4, 5, 6, 7]).units)
    for length in (4, 6):
        assert prefix_digest(cache.tree, node_at(cache, length)) == key_digest(None, units, length)
    assert key_digest(None, units, 4) != key_digest("other", units, 4)


def test_the_report_names_the_request_the_ghost_list_wins() -> None:
    """On the issue's cell the default without and with its ghost list differ by one
    request's hit: the shared system prompt's state, 512 tokens."""
    trace = suite(only=["agentic_interfered/s1"])[0]
    options = sized(trace.options, *BUDGETS["tight"]).updated(config="hybrid")
    rec = Recorder()
    rec.install()
    runs = {order: replay(rec, options, order) for order in (NO_GHOSTS, "reuse_credit")}
    lines = report("cell", runs)
    assert f"- 1 requests' hits differ; reuse_credit minus {NO_GHOSTS}: +512 hit tokens" in lines
    assert any(line.startswith("- request ") for line in lines)
