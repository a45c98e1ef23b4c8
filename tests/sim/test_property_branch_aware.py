"""Random traffic with the branch-aware, flop-aware and reuse-aware eviction orders (and the
reuse-aware and greedy-dual SWA orders) and checkpoint placement on full+SWA, full+Mamba and
full+SWA+Mamba: every pool's invariants after every step, and every slot back at the end
(nothing leaked)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.studies.retired_orders import (
    BRANCH_AWARE,
    FLOP_AWARE,
    GREEDY_DUAL,
    GREEDY_DUAL_WINDOW,
    SWA_REUSE_AWARE,
)
from tests.sim.specs import drain_and_check, fitting_specs, small_cache
from uniradix.sim.metrics import ReplayMetrics
from uniradix.sim.replay import NullRunner
from uniradix.sim.scheduler import Scheduler, SchedulerConfig


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=st.sampled_from(["swa", "mamba", "hybrid"]),
    policy=st.sampled_from(["lru", BRANCH_AWARE, FLOP_AWARE, "reuse_credit"]),
    swa_policy=st.sampled_from(
        ["lru", SWA_REUSE_AWARE, GREEDY_DUAL, GREEDY_DUAL_WINDOW, BRANCH_AWARE, "reuse_credit"]
    ),
    grid=st.sampled_from([None, 2, 4, 8]),
    prompts=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=40), min_size=1, max_size=8),
    outputs=st.lists(st.integers(1, 12), min_size=8, max_size=8),
    page_size=st.sampled_from([1, 2, 4]),
    full_pages=st.integers(24, 48),
    window=st.integers(1, 8),
    mamba_slots=st.integers(6, 16),
    max_running=st.integers(1, 3),
    chunk_pages=st.integers(1, 6),
)
def test_branch_aware_traffic_keeps_every_pool_exact_and_counts_lost_hits(  # type: ignore[no-untyped-def]
    config,
    policy,
    swa_policy,
    grid,
    prompts,
    outputs,
    page_size,
    full_pages,
    window,
    mamba_slots,
    max_running,
    chunk_pages,
) -> None:
    full_tokens = full_pages * page_size
    cache = small_cache(
        config,
        full_tokens,
        page_size,
        window,
        mamba_slots,
        aux_eviction_policy=policy,
        swa_eviction_policy=swa_policy,
    )
    specs = fitting_specs(prompts, outputs, full_tokens // 2)
    metrics = ReplayMetrics(cache, len(specs), progress=False)
    scheduler = Scheduler(
        cache,
        NullRunner(),
        specs,
        listener=metrics,
        config=SchedulerConfig(
            max_running,
            chunk_pages * page_size,
            0.0,
            check_invariants=True,
            checkpoint_placement=True,
            checkpoint_grid=grid,
        ),
    )
    scheduler.run()
    assert scheduler.num_invariant_checks == scheduler.num_steps
    lost = metrics.lost_hits.summary()
    assert lost["full_kv_hit_tokens"] == lost["usable_hit_tokens"] + lost["lost_tokens"]
    assert lost["usable_hit_tokens"] == metrics.hit_tokens
    drain_and_check(cache, full_tokens)
