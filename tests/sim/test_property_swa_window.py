"""Random chunked traffic with the `greedy_dual_window` SWA order and checkpoint placement
(prompts sharing stems, so windows are served, split and evicted while others run): every
pool's invariants after every step (credits, serve counts and marks only on live windows,
every live window credited), every slot back at the end, and victims the order chose
while requests ran, across the examples (the property would hold vacuously without them)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sim.specs import drain_and_check, fitting_specs, small_cache
from uniradix.components.swa_credit import SWAWindowCreditEviction
from uniradix.sim.replay import NullRunner
from uniradix.sim.scheduler import Scheduler, SchedulerConfig

TAKEN = {"victims": 0}


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
def window_credit_traffic(  # type: ignore[no-untyped-def]
    config, grid, stems, tails, outputs, page_size, full_pages, window, max_running, chunk_pages
) -> None:
    full_tokens = full_pages * page_size
    cache = small_cache(
        config, full_tokens, page_size, window, swa_eviction_policy="greedy_dual_window"
    )
    prompts = [stems[i % len(stems)] + tail for i, tail in enumerate(tails)]
    specs = fitting_specs(prompts, outputs, full_tokens // 2)
    orders = [
        c._reuse
        for c in cache.components
        if isinstance(getattr(c, "_reuse", None), SWAWindowCreditEviction)
    ]
    assert len(orders) == 1
    order = orders[0]
    candidates = SWAWindowCreditEviction.candidates

    def counted(self):  # type: ignore[no-untyped-def]
        for victim in candidates(self):
            TAKEN["victims"] += 1
            yield victim

    order.candidates = counted.__get__(order)  # type: ignore[method-assign]
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
    before = TAKEN["victims"]
    scheduler.run()
    assert scheduler.num_invariant_checks == scheduler.num_steps
    during = TAKEN["victims"] - before
    drain_and_check(cache, full_tokens)
    TAKEN["victims"] = before + during  # the drain's victims do not count


def test_whole_window_credits_keep_every_pool_exact() -> None:
    TAKEN["victims"] = 0
    window_credit_traffic()
    assert TAKEN["victims"] > 0
