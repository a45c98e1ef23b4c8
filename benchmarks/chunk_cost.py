"""Cost of one `cache_unfinished_req` chunk against the prompt's length.

    .venv/bin/python -m benchmarks.chunk_cost [--lengths 8192 32768 131072 262144]
        [--chunk 8192] [--config full] [--repeats 3] [--events]

For each prompt length L, a fresh cache (page 1, a pool with room for the prompt) admits
one request of L random tokens and prefills it C tokens at a time; only the
`cache_unfinished_req` calls are timed (with `--events`, each with the KV events it makes,
taken from an `EventRecorder`: the chunk's page digests hashed and its events built). The
figure is the median µs per chunk over the last chunks (the second half of the prompt,
where a cost that follows the whole prompt shows; a median, as a shared machine's
preemptions land on a few chunks), best of `--repeats` runs. Work proportional to the
chunk keeps the row flat across L.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from uniradix import CacheConfig, MatchPrefixParams, Req, build_cache
from uniradix.events.recorder import EventRecorder


def chunk_us(length: int, chunk: int, config: str, seed: int, events: bool = False) -> float:
    """Median µs of the `cache_unfinished_req` calls of the second half of one prompt."""
    rng = random.Random(seed)
    tokens = [rng.randrange(1 << 20) for _ in range(length)]
    kwargs: dict[str, int] = {}
    if config in ("swa", "hybrid"):
        kwargs["sliding_window"] = 4096
    if config in ("mamba", "hybrid"):
        kwargs["mamba_slots"] = 8
    cache = build_cache(
        CacheConfig.of(full_tokens=length + chunk, max_context_len=length + 1, **kwargs)  # type: ignore[arg-type]
    )
    recorder = EventRecorder(cache) if events else None
    pools = cache.pools
    row = pools.req_to_token_pool.alloc()
    assert row is not None
    req = Req(token_ids=tokens, req_pool_idx=row)
    match = cache.match_prefix(MatchPrefixParams(cache.make_key(tokens[:-1]), req=req))
    req.lock = cache.inc_lock_ref(match.last_device_node)
    req.last_node = match.last_device_node
    times: list[int] = []
    while req.kv_committed_len < length:
        step = min(chunk, length - req.kv_committed_len)
        slots = pools.kv_allocator.alloc(step)
        assert slots is not None, "pool too small"
        pools.req_to_token_pool.write(row, req.kv_allocated_len, slots)
        req.kv_allocated_len += step
        req.kv_committed_len += step
        t0 = time.perf_counter_ns()
        cache.cache_unfinished_req(req)
        if recorder is not None:
            recorder.take_events()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times[len(times) // 2 :]) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[8192, 32768, 131072, 262144])
    parser.add_argument("--chunk", type=int, default=8192)
    parser.add_argument("--config", default="full", choices=["full", "swa", "mamba", "hybrid"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--events", action="store_true", help="record KV events per chunk")
    args = parser.parse_args(argv)
    if args.chunk <= 0 or args.repeats <= 0:
        parser.error(f"--chunk and --repeats must be positive, got {args.chunk}, {args.repeats}")
    rows = []
    for length in args.lengths:
        best = min(
            chunk_us(length, args.chunk, args.config, seed, args.events)
            for seed in range(args.repeats)
        )
        rows.append({"prompt_tokens": length, "chunk": args.chunk, "us_per_chunk": round(best)})
        print(f"L={length:>7}  C={args.chunk}  {best:10.0f} µs per chunk", flush=True)
    print(json.dumps({"config": args.config, "events": args.events, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
