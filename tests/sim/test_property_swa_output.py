"""Random chunked traffic with the `greedy_dual_output` SWA order and checkpoint placement
(`ChunkedTraffic`): every pool's invariants after every step (credits, serve counts, pass and
output marks only on live windows, sampled ones among the outputs), every slot back at the end,
and, across the examples, output windows marked and victims taken while requests ran (the
property would hold vacuously without them)."""

from hypothesis import HealthCheck, given, settings

from tests.sim.specs import CHUNKED_TRAFFIC, ChunkedTraffic, drain_and_check
from uniradix.components.swa_output import SWAOutputCreditEviction

TAKEN = {"victims": 0, "outputs": 0}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traffic=CHUNKED_TRAFFIC)
def output_credit_traffic(traffic: ChunkedTraffic) -> None:
    cache = traffic.cache(swa_eviction_policy="greedy_dual_output")
    orders = [
        c._reuse
        for c in cache.components
        if isinstance(getattr(c, "_reuse", None), SWAOutputCreditEviction)
    ]
    assert len(orders) == 1
    order = orders[0]
    candidates = SWAOutputCreditEviction.candidates

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
    TAKEN["outputs"] += order._output_inserts
    assert 0.0 <= order.output_factor() <= 1.0
    drain_and_check(cache, traffic.full_tokens)
    TAKEN["victims"] = before + during  # the drain's victims do not count


def test_output_credits_keep_every_pool_exact() -> None:
    TAKEN.update(victims=0, outputs=0)
    output_credit_traffic()
    assert TAKEN["victims"] > 0
    assert TAKEN["outputs"] > 0
