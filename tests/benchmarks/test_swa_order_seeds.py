"""`benchmarks.studies.swa_order_seeds`: seed 0 of a workload is `benchmarks.hybrid_hits`' row,
and the seed draws other requests."""

from benchmarks.hybrid_hits import base_options, full_pool, run, sized
from benchmarks.studies.retired_orders import GREEDY_DUAL, GREEDY_DUAL_WINDOW
from benchmarks.studies.swa_order_seeds import ratios

ORDERS = [GREEDY_DUAL, GREEDY_DUAL_WINDOW]


def test_seed_zero_is_the_hybrid_hits_row() -> None:
    base = base_options("agentic", "").updated(max_requests=40)
    got = ratios(base, ORDERS, "hybrid", 1024, 24)
    sized_base = base.updated(full_tokens=full_pool(base)[0])
    full = run(sized_base.updated(config="full"))["hit_rate"]
    assert full > 0
    want = [
        run(sized(sized_base.updated(swa_eviction_policy=o), "hybrid", 1024, 1, 24))["hit_rate"]
        / full
        for o in ORDERS
    ]
    assert got == want


def test_another_seed_draws_other_requests() -> None:
    base = base_options("agentic", "")
    one = ratios(base, ORDERS[:1], "hybrid", 1024, 24)
    other = ratios(base.updated(seed=3), ORDERS[:1], "hybrid", 1024, 24)
    assert one != other
