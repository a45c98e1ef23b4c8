"""Random chunked traffic with the `greedy_dual_window` and `greedy_dual_output` SWA orders and
checkpoint placement (`ChunkedTraffic`): every pool's invariants after every step (credits,
serve counts and marks only on live windows, every live window credited; output marks only on
live windows, sampled ones among the outputs), every slot back at the end, and, across the
examples, victims the order chose while requests ran and (`greedy_dual_output`) output windows
marked (the property would hold vacuously without them)."""

from hypothesis import HealthCheck, given, settings

from benchmarks.studies.retired_orders import GREEDY_DUAL_WINDOW
from tests.sim.specs import CHUNKED_TRAFFIC, ChunkedTraffic, drain_and_check
from uniradix.eviction.swa_credit import SWACreditEviction
from uniradix.eviction.swa_output import SWAOutputCreditEviction

TAKEN = {"victims": 0, "outputs": 0}


def play(traffic: ChunkedTraffic, policy: str, order_class: type[SWACreditEviction]) -> None:
    cache = traffic.cache(swa_eviction_policy=policy)
    orders = [
        c._reuse for c in cache.components if isinstance(getattr(c, "_reuse", None), order_class)
    ]
    assert len(orders) == 1
    order = orders[0]
    candidates = order_class.candidates

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
    if isinstance(order, SWAOutputCreditEviction):
        TAKEN["outputs"] += order._output_inserts
        assert 0.0 <= order.output_factor() <= 1.0
    drain_and_check(cache, traffic.full_tokens)
    TAKEN["victims"] = before + during  # the drain's victims do not count


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traffic=CHUNKED_TRAFFIC)
def window_credit_traffic(traffic: ChunkedTraffic) -> None:
    play(traffic, GREEDY_DUAL_WINDOW, SWACreditEviction)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traffic=CHUNKED_TRAFFIC)
def output_credit_traffic(traffic: ChunkedTraffic) -> None:
    play(traffic, "reuse_credit", SWAOutputCreditEviction)


def test_whole_window_credits_keep_every_pool_exact() -> None:
    TAKEN.update(victims=0, outputs=0)
    window_credit_traffic()
    assert TAKEN["victims"] > 0


def test_output_credits_keep_every_pool_exact() -> None:
    TAKEN.update(victims=0, outputs=0)
    output_credit_traffic()
    assert TAKEN["victims"] > 0
    assert TAKEN["outputs"] > 0
