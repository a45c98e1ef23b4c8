"""Random chunked traffic with the `greedy_dual` SWA order and checkpoint placement, prompts
several chunks long so that windows at middle chunk ends are marked passed: every pool's
invariants after every step (the order's marks only on live windows), nothing leaked, and
the marks taken across the examples (the property would hold vacuously without them)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sim.specs import drain_and_check, fitting_specs, small_cache
from uniradix.components.swa_credit import SWACreditEviction
from uniradix.sim.replay import NullRunner
from uniradix.sim.scheduler import Scheduler, SchedulerConfig

MARKED = {"windows": 0}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=st.sampled_from(["swa", "hybrid"]),
    grid=st.sampled_from([None, 4, 8]),
    stems=st.lists(st.lists(st.integers(0, 2), min_size=4, max_size=12), min_size=1, max_size=3),
    tails=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=24), min_size=2, max_size=8),
    outputs=st.lists(st.integers(1, 6), min_size=8, max_size=8),
    page_size=st.sampled_from([1, 2]),
    full_pages=st.integers(40, 72),
    window=st.integers(1, 4),
    max_running=st.integers(1, 3),
    chunk_pages=st.integers(1, 3),
)
def passed_windows_traffic(  # type: ignore[no-untyped-def]
    config, grid, stems, tails, outputs, page_size, full_pages, window, max_running, chunk_pages
) -> None:
    full_tokens = full_pages * page_size
    cache = small_cache(config, full_tokens, page_size, window, swa_eviction_policy="greedy_dual")
    prompts = [stems[i % len(stems)] + tail for i, tail in enumerate(tails)]
    specs = fitting_specs(prompts, outputs, full_tokens // 2)
    orders = [
        c._reuse
        for c in cache.components
        if isinstance(getattr(c, "_reuse", None), SWACreditEviction)
    ]
    step = SWACreditEviction.request_step
    scheduler = Scheduler(
        cache,
        NullRunner(),
        specs,
        config=SchedulerConfig(
            max_running,
            chunk_pages * page_size,
            0.0,
            check_invariants=True,
            checkpoint_placement=True,
            checkpoint_grid=grid,
        ),
    )
    for order in orders:
        assert isinstance(order, SWACreditEviction)

        def counted(req, order=order):  # type: ignore[no-untyped-def]
            before = len(order._passed)
            step(order, req)
            MARKED["windows"] += len(order._passed) - before

        order.request_step = counted  # type: ignore[method-assign]
    scheduler.run()
    assert scheduler.num_invariant_checks == scheduler.num_steps
    drain_and_check(cache, full_tokens)


def test_passed_windows_keep_every_pool_exact() -> None:
    MARKED["windows"] = 0
    passed_windows_traffic()
    assert MARKED["windows"] > 0
