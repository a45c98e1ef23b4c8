"""`benchmarks.studies.swa_running_share` samples, after every scheduling step, the SWA tokens that
running requests use and those left evictable, and puts the scheduler back as it was."""

from benchmarks.hybrid_hits import base_options, full_pool, sized
from benchmarks.studies.swa_running_share import p90, sampled_run
from uniradix.sim.scheduler import Scheduler


def test_samples_split_the_swa_pool_between_running_and_cached_windows() -> None:
    """agentic's first 24 requests at the SWA floor (a chunk plus two 1024-token windows):
    every sample fits the pool, requests ran and windows were left cached at some step."""
    base = base_options("agentic", "").updated(max_requests=24)
    base = base.updated(full_tokens=full_pool(base)[0])
    options = sized(base, "swa", 1024, 1)
    step = Scheduler.step
    summary, samples = sampled_run(options)
    assert Scheduler.step is step
    assert len(samples) == summary["steps"]
    assert all(
        in_use >= 0 and evictable >= 0 and in_use + evictable <= options.pools.swa_tokens
        for _, in_use, evictable in samples
    )
    assert max(running for running, _, _ in samples) > 1
    assert max(in_use for _, in_use, _ in samples) > 0
    assert max(evictable for _, _, evictable in samples) > 0


def test_p90_is_the_value_below_which_nine_tenths_of_samples_lie() -> None:
    assert p90(list(range(11))) == 9
    assert p90([5]) == 5
