"""`benchmarks.studies.swa_order_seeds`: seed 0 of a workload is `benchmarks.hybrid_hits`' row,
and the seed draws other requests."""

from dataclasses import replace

from benchmarks.hybrid_hits import base_options, full_pool, run, sized
from benchmarks.studies.swa_order_seeds import ratios

ORDERS = ["greedy_dual", "greedy_dual_window"]


def test_seed_zero_is_the_hybrid_hits_row() -> None:
    base = replace(base_options("agentic", ""), max_requests=40)
    got = ratios(base, ORDERS, "hybrid", 1024, 24)
    sized_base = replace(base, full_tokens=full_pool(base)[0])
    full = run(replace(sized_base, config="full"))["hit_rate"]
    assert full > 0
    want = [
        run(sized(replace(sized_base, swa_eviction_policy=o), "hybrid", 1024, 1, 24))["hit_rate"]
        / full
        for o in ORDERS
    ]
    assert got == want


def test_another_seed_draws_other_requests() -> None:
    base = base_options("agentic", "")
    one = ratios(base, ORDERS[:1], "hybrid", 1024, 24)
    other = ratios(replace(base, seed=3), ORDERS[:1], "hybrid", 1024, 24)
    assert one != other
