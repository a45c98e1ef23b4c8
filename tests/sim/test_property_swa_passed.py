"""Random chunked traffic with the `greedy_dual` SWA order and checkpoint placement
(`ChunkedTraffic`: prompts several chunks long, so that windows at middle chunk ends are
marked passed): every pool's invariants after every step (the order's marks only on live
windows), nothing leaked, and the marks taken across the examples (the property would hold
vacuously without them)."""

from hypothesis import HealthCheck, given, settings

from benchmarks.studies.retired_orders import GREEDY_DUAL
from tests.sim.specs import CHUNKED_TRAFFIC, ChunkedTraffic, drain_and_check
from uniradix.eviction.swa_credit import SWACreditEviction

MARKED = {"windows": 0}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traffic=CHUNKED_TRAFFIC)
def passed_windows_traffic(traffic: ChunkedTraffic) -> None:
    cache = traffic.cache(swa_eviction_policy=GREEDY_DUAL)
    orders = [
        c._reuse
        for c in cache.components
        if isinstance(getattr(c, "_reuse", None), SWACreditEviction)
    ]
    step = SWACreditEviction.request_step
    scheduler = traffic.scheduler(cache)
    for order in orders:
        assert isinstance(order, SWACreditEviction)

        def counted(req, order=order):  # type: ignore[no-untyped-def]
            before = len(order._passed)
            step(order, req)
            MARKED["windows"] += len(order._passed) - before

        order.request_step = counted  # type: ignore[method-assign]
    scheduler.run()
    assert scheduler.num_invariant_checks == scheduler.num_steps
    drain_and_check(cache, traffic.full_tokens)


def test_passed_windows_keep_every_pool_exact() -> None:
    MARKED["windows"] = 0
    passed_windows_traffic()
    assert MARKED["windows"] > 0
