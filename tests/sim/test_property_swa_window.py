"""Random chunked traffic with the `greedy_dual_window` SWA order and checkpoint placement
(`ChunkedTraffic`): every pool's invariants after every step (credits, serve counts and marks
only on live windows, every live window credited), every slot back at the end, and victims the
order chose while requests ran, across the examples (the property would hold vacuously
without them)."""

from hypothesis import HealthCheck, given, settings

from tests.sim.specs import CHUNKED_TRAFFIC, ChunkedTraffic, drain_and_check
from uniradix.components.swa_credit import SWAWindowCreditEviction

TAKEN = {"victims": 0}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traffic=CHUNKED_TRAFFIC)
def window_credit_traffic(traffic: ChunkedTraffic) -> None:
    cache = traffic.cache(swa_eviction_policy="greedy_dual_window")
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
    scheduler = traffic.scheduler(cache)
    before = TAKEN["victims"]
    scheduler.run()
    assert scheduler.num_invariant_checks == scheduler.num_steps
    during = TAKEN["victims"] - before
    drain_and_check(cache, traffic.full_tokens)
    TAKEN["victims"] = before + during  # the drain's victims do not count


def test_whole_window_credits_keep_every_pool_exact() -> None:
    TAKEN["victims"] = 0
    window_credit_traffic()
    assert TAKEN["victims"] > 0
