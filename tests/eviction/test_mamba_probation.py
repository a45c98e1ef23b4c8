"""The `reuse_aware` order of Mamba states: states with no sign of reuse are on probation and
go first, with exact victims; and, end to end, one-off bursts no longer push out
conversations."""

from pathlib import Path

from benchmarks.hit_table import BUDGETS, measure, sized
from benchmarks.studies.retired_orders import FLOP_AWARE
from benchmarks.traces.adversarial import bursts
from benchmarks.traces.suite import base
from benchmarks.traces.trace_io import spec_rows, write_jsonl
from tests.eviction.test_aux_eviction import holders, mamba_cache, put
from tests.eviction.test_flop_aware import node_at
from uniradix import EvictParams, MatchPrefixParams, RadixKey
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.components.mamba import MambaComponent
from uniradix.eviction.mamba_probation import ProbationEviction
from uniradix.types import ComponentType


def probation_of(cache: UnifiedRadixCache) -> ProbationEviction:
    mamba = cache.component(ComponentType.MAMBA)
    assert isinstance(mamba, MambaComponent) and isinstance(mamba._credits, ProbationEviction)
    return mamba._credits


def test_a_one_off_prompt_goes_before_a_continued_conversation() -> None:
    """Turn 2 of a conversation passes over turn 1's prompt (a shared prefix): its state at 12
    is kept, turn 1's state at 8 (covered by it) and a long one-off prompt's are on probation
    and go first, although the credits alone would take the tail (it saves 4 tokens)."""
    cache = mamba_cache("reuse_credit")
    put(cache, list(range(1, 9)))
    put(cache, [*range(1, 9), 20, 21, 22, 23])
    put(cache, list(range(30, 60)))
    order = probation_of(cache)
    first, tail, one_off = node_at(cache, 8), node_at(cache, 12), node_at(cache, 30)
    assert [order.on_probation(n) for n in (first, tail, one_off)] == [True, False, True]
    assert order.credit(tail) < order.credit(one_off)
    assert cache.evict(EvictParams(mamba_num=2)).mamba_num_evicted == 2
    assert holders(cache) == [12]
    cache.check_invariants()

    credits_only = mamba_cache(FLOP_AWARE)
    put(credits_only, list(range(1, 9)))
    put(credits_only, [*range(1, 9), 20, 21, 22, 23])
    put(credits_only, list(range(30, 60)))
    credits_only.evict(EvictParams(mamba_num=2))
    assert holders(credits_only) == [30]


def test_a_resume_promotes_a_state_and_a_fork_keeps_it() -> None:
    """A one-off state resumed from leaves probation; a branch stored below it makes a fork,
    so it is not covered; a later one-off, more credited, goes first."""
    cache = mamba_cache("reuse_credit")
    put(cache, [1, 2, 3, 4])
    order = probation_of(cache)
    base_state = node_at(cache, 4)
    assert order.on_probation(base_state)
    cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 5])))
    assert not order.on_probation(base_state)
    put(cache, [1, 2, 3, 4, 5, 6, 7, 8])  # covers the state at 4 (single-child chain)
    assert order.on_probation(base_state)
    cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 9])))  # a branch resumes at 4
    put(cache, [1, 2, 3, 4, 9, 10, 11, 12])  # a fork at 4: not covered
    assert not order.on_probation(base_state)
    put(cache, list(range(30, 51)))
    assert order.credit(node_at(cache, 21)) > order.credit(base_state)
    assert cache.evict(EvictParams(mamba_num=1)).mamba_num_evicted == 1
    assert 4 in holders(cache) and 21 not in holders(cache)
    cache.check_invariants()


def test_bursts_of_one_off_prompts_keep_the_conversations_states(tmp_path: Path) -> None:
    """End to end (a replay through the public API): conversations with bursts of one-off
    prompts between their turns, Mamba slots for half the contexts the full pool holds. The
    credit order alone (`flop_aware`) and LRU let the bursts push out every conversation's
    state; `reuse_aware` keeps them and hits."""
    trace = write_jsonl(tmp_path / "bursts.jsonl", spec_rows(bursts(0)))
    opts = sized(base(trace=str(trace), trace_format="tokens"), *BUDGETS["ample"])
    rates = {o: measure(opts, "mamba", o)["hit_rate"] for o in ("lru", FLOP_AWARE, "reuse_credit")}
    assert rates["reuse_credit"] > 0
    assert rates["reuse_credit"] > max(rates["lru"], rates[FLOP_AWARE])
