"""How much of the SWA pool the running requests take on the built-in workloads, at issue 14's
sizes: what is left for cached windows tells whether a full+SWA row below target is short of
memory (nothing any eviction order could keep) or of policy.

    .venv/bin/python -m benchmarks.studies.swa_running_share [--sources agentic long_doc_qa]
        [--windows 1024 4096] [--scales 1 1.5 2]

After every scheduling step of a full+SWA replay (`benchmarks.hybrid_hits` sizes, the SWA pool
times each `--scale`), the SWA tokens in use by running requests (their own slots plus the
cached windows they lock) and the evictable SWA tokens (cached windows nobody locks) are
sampled; the table gives their mean and 90th percentile, the mean number of running requests,
and the hit rate as a fraction of full-only. A cached window can serve a later request only
if it stays evictable until then, so where the mean evictable share is below one window per
context that is resumed, the hits are lost to capacity. A measurement in this process, not a
feature: it wraps the scheduler's step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

from benchmarks.hybrid_hits import PAGE, WINDOWS, base_options, full_pool, run, sized
from uniradix.sim.replay import ReplayOptions
from uniradix.sim.scheduler import Scheduler
from uniradix.types import ComponentType

Sample = tuple[int, int, int]  # (running requests, SWA in use by them, evictable SWA)


def sampled_run(options: ReplayOptions) -> tuple[dict[str, Any], list[Sample]]:
    """The replay summary of `options` and one sample per scheduling step."""
    samples: list[Sample] = []
    step = Scheduler.step

    def sampling_step(self: Scheduler) -> None:
        step(self)
        cache = self.cache
        running_swa = self.held_by_requests()["swa"] + cache.protected_size(ComponentType.SWA)
        samples.append((len(self.running), running_swa, cache.evictable_size(ComponentType.SWA)))

    Scheduler.step = sampling_step  # type: ignore[method-assign]
    try:
        summary = run(options)
    finally:
        Scheduler.step = step  # type: ignore[method-assign]
    return summary, samples


def p90(values: list[int]) -> int:
    return sorted(values)[int(0.9 * (len(values) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sources", nargs="+", default=["agentic", "agentic_interfered", "long_doc_qa"]
    )
    parser.add_argument("--windows", type=int, nargs="+", default=list(WINDOWS))
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0])
    args = parser.parse_args()
    print(
        "| source | W | full KV | SWA pool | running (mean) | SWA in use by running mean / p90 "
        "| evictable SWA mean / p90 | hit / full-only |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for source in args.sources:
        base = base_options(source, "")
        base = base.updated(full_tokens=full_pool(base)[0])
        full = run(base.updated(config="full"))["hit_rate"]
        for window in args.windows:
            for scale in args.scales:
                options = sized(base, "swa", window, 1)
                swa_tokens = int(options.pools.swa_tokens * scale) // PAGE * PAGE
                summary, samples = sampled_run(options.updated(swa_tokens=swa_tokens))
                running = [s[0] for s in samples]
                in_use = [s[1] for s in samples]
                evictable = [s[2] for s in samples]
                ratio = f"{summary['hit_rate'] / full:.3f}" if full else "n/a"
                print(
                    f"| {source} | {window} | {base.pools.full_tokens} | {swa_tokens} | "
                    f"{statistics.fmean(running):.1f} | {statistics.fmean(in_use):.0f} / "
                    f"{p90(in_use)} | {statistics.fmean(evictable):.0f} / {p90(evictable)} | "
                    f"{ratio} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
