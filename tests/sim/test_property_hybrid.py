"""Random traffic through the scheduler on full+SWA, full+Mamba and full+SWA+Mamba caches:
every pool's invariants after every step, and every slot back at the end."""

from contextlib import nullcontext
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sim.specs import drain_and_check, fitting_specs, small_cache
from uniradix.sim.replay import NullRunner
from uniradix.sim.scheduler import Scheduler, SchedulerConfig


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=st.sampled_from(["swa", "mamba", "hybrid"]),
    prompts=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=40), min_size=1, max_size=8),
    outputs=st.lists(st.integers(1, 12), min_size=8, max_size=8),
    page_size=st.sampled_from([1, 2, 4]),
    full_pages=st.integers(24, 48),
    window=st.integers(1, 8),
    mamba_slots=st.integers(6, 16),
    max_running=st.integers(1, 3),
    chunk_pages=st.integers(1, 6),
    judge_outputs=st.booleans(),
)
def test_hybrid_traffic_keeps_every_pool_exact(  # type: ignore[no-untyped-def]
    config,
    prompts,
    outputs,
    page_size,
    full_pages,
    window,
    mamba_slots,
    max_running,
    chunk_pages,
    judge_outputs,
) -> None:
    """`judge_outputs`: decode outputs are judged from the first finish state on and every
    other request samples (a few requests reach both: tracked and untracked outputs)."""
    judged = (
        mock.patch.multiple("uniradix.sim.placement", OUTPUT_WARMUP=0, OUTPUT_SAMPLE=2)
        if judge_outputs
        else nullcontext()
    )
    with judged:
        full_tokens = full_pages * page_size
        cache = small_cache(config, full_tokens, page_size, window, mamba_slots)
        specs = fitting_specs(prompts, outputs, full_tokens // 2)
        scheduler = Scheduler(
            cache,
            NullRunner(),
            specs,
            SchedulerConfig(max_running, chunk_pages * page_size, 0.0, check_invariants=True),
        )
        scheduler.run()
        assert scheduler.num_invariant_checks == scheduler.num_steps
        drain_and_check(cache, full_tokens, mamba_slots)
