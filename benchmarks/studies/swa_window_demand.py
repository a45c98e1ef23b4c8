"""How many SWA tokens the hits of full attention need kept at once: the capacity side of the
full+SWA gap on the Mooncake trace.

    .venv/bin/python -m benchmarks.studies.swa_window_demand [--windows 1024 4096] \
        [--max-requests N]

A full-attention-only replay at issue 14's sizes (page 16, full KV a quarter of the working
set) gives each request's hit length `h`. On full+SWA that hit needs the `W` tokens before
`h` (its window) live when the request is matched. Those tokens exist only if a request
computed them, so they must have stayed in the SWA pool at least since the last earlier
request whose prompt holds the prefix `[0, h)`: the window is *pending* over that interval.
At each request's arrival this counts the distinct pages of every pending window (windows that
share pages count them once) against the SWA pool of `hybrid_hits` (a quarter of the full
pool). Wherever the pending windows alone need more than the pool, some of those hits cannot
all be kept whole, whatever the eviction order; running requests' own windows and prefill
chunks (not counted) only add to the demand. The hits lost then may still resume at a
shallower window, so this is the demand, not a bound on the hit rate.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict

from benchmarks.hybrid_hits import PAGE, TRACE, base_options, full_pool, sized
from uniradix.sim.metrics import ReplayMetrics
from uniradix.sim.replay import ReplayOptions, load_specs, run_replay
from uniradix.sim.request_spec import BlockPrompt

PageId = tuple[int, int, int]  # (hash of the blocks before, this block's id, page in block)


def full_only_hits_at(options: ReplayOptions) -> dict[int, int]:
    """{request id: hit length} of a full-attention-only replay at `options`' full pool."""
    hits: dict[int, int] = {}
    admit = ReplayMetrics.on_admit

    def record(self: ReplayMetrics, request: object, match: object) -> None:
        spec, length = request.spec, match.device_prefix_len  # type: ignore[attr-defined]
        hits.setdefault(spec.rid, length)
        admit(self, request, match)  # type: ignore[arg-type]

    ReplayMetrics.on_admit = record  # type: ignore[method-assign]
    try:
        run_replay(options.updated(config="full"))
    finally:
        ReplayMetrics.on_admit = admit  # type: ignore[method-assign]
    return hits


def full_only_hits(max_requests: int | None) -> tuple[dict[int, int], int, int]:
    """({request id: full-only hit length}, full KV tokens, request count)."""
    base = base_options("trace", str(TRACE)).updated(max_requests=max_requests)
    base = base.updated(full_tokens=full_pool(base)[0])
    return full_only_hits_at(base), base.pools.full_tokens, len(load_specs(base))


def chain(prompt: BlockPrompt) -> list[int]:
    """Hash of the blocks before each block (0 for the first)."""
    out, h = [], 0
    for block in prompt.hash_ids:
        out.append(h)
        h = hash((h, block))
    return out


def window_pages(prompt: BlockPrompt, hashes: list[int], end: int, window: int) -> set[PageId]:
    size = prompt.block_size
    return {
        (hashes[p * PAGE // size], prompt.hash_ids[p * PAGE // size], p * PAGE % size // PAGE)
        for p in range(max(0, end - window) // PAGE, end // PAGE)
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--max-requests", type=int, default=None)
    args = parser.parse_args()
    hits, full_tokens, count = full_only_hits(args.max_requests)
    base = base_options("trace", str(TRACE)).updated(max_requests=args.max_requests)
    specs = load_specs(base)
    prompts = [s.prompt for s in specs]
    assert all(isinstance(p, BlockPrompt) for p in prompts)
    hashes = [chain(p) for p in prompts]  # type: ignore[arg-type]
    # Last request so far holding each page-aligned prefix, found by its last page's id.
    last_holder: dict[PageId, int] = {}
    starts: dict[int, int] = {}  # request id -> since when its window is pending
    for rid, prompt in enumerate(prompts):
        assert isinstance(prompt, BlockPrompt)
        h = hits.get(rid, 0)
        if h:
            (end,) = window_pages(prompt, hashes[rid], h, PAGE)
            starts[rid] = last_holder.get(end, rid)
        for p in range(len(prompt) // PAGE):
            last_holder[next(iter(window_pages(prompt, hashes[rid], (p + 1) * PAGE, PAGE)))] = rid
    hit_tokens = sum(hits.values())
    print(f"trace, {count} requests, full KV {full_tokens} tokens, {len(starts)} hits")
    print(
        "| W | SWA pool | pending windows at an arrival, median / p90 "
        "| their distinct tokens, median / p90 | arrivals where they exceed the pool |"
    )
    print("|---|---|---|---|---|")
    for window in args.windows:
        pool = sized(base.updated(full_tokens=full_tokens), "swa", window, 1).pools.swa_tokens
        pending: dict[int, set[PageId]] = {}
        ending: defaultdict[int, list[int]] = defaultdict(list)
        begin: defaultdict[int, list[int]] = defaultdict(list)
        for rid, start in starts.items():
            begin[start].append(rid)
            ending[rid].append(rid)
        counts, tokens, over = [], [], 0
        for t in range(count):
            for rid in begin[t]:
                if rid != t:  # a hit whose prefix nobody held before is no SWA demand
                    prompt = prompts[rid]
                    assert isinstance(prompt, BlockPrompt)
                    pending[rid] = window_pages(prompt, hashes[rid], hits[rid], window)
            union: set[PageId] = set().union(*pending.values()) if pending else set()
            counts.append(len(pending))
            tokens.append(len(union) * PAGE)
            over += len(union) * PAGE > pool
            for rid in ending[t]:
                pending.pop(rid, None)
        q = statistics.quantiles(tokens, n=10)
        cq = statistics.quantiles(counts, n=10)
        print(
            f"| {window} | {pool} | {statistics.median(counts):.0f} / {cq[-1]:.0f} | "
            f"{statistics.median(tokens):,.0f} / {q[-1]:,.0f} | "
            f"{over / count:.0%} |"
        )
    print(f"full-only hit tokens {hit_tokens:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
