"""Median µs per match_prefix / insert / evict on a full-attention cache of ~100k tokens.

Workload: multi-turn chat. Each conversation has a shared system prompt (one of 20) and grows
by a user turn and an answer per request; the pool is kept full, so every insert is preceded
by an eviction. Each request runs the scheduler's call sequence

    match_prefix -> inc_lock_ref -> (evict if short) -> alloc -> insert -> dec_lock_ref

and only the three cache calls are timed. Run: `python benchmarks/bench_ops.py [--json]`.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch

from uniradix import (
    CacheConfig,
    EvictParams,
    InsertParams,
    MatchPrefixParams,
    RadixKey,
    build_cache,
)


def chat_stream(num_requests: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    systems = [[rng.randrange(32000) for _ in range(400)] for _ in range(20)]
    conversations: list[list[int]] = []
    stream = []
    for _ in range(num_requests):
        if not conversations or rng.random() < 0.3:
            conversations.append(list(rng.choice(systems)))
        conv = rng.choice(conversations[-64:])
        conv += [rng.randrange(32000) for _ in range(rng.randrange(40, 200))]
        stream.append(list(conv))
        conv += [rng.randrange(32000) for _ in range(rng.randrange(20, 150))]
    return stream


def run(
    page_size: int, pool_tokens: int, num_requests: int, host_tokens: int | None = None
) -> dict[str, float]:
    config = CacheConfig.of(full_tokens=pool_tokens, page_size=page_size)
    if host_tokens is not None:  # an L2 host tier, write-through, synchronous transfers
        config = CacheConfig.of(
            full_tokens=pool_tokens, page_size=page_size, host_tokens=host_tokens
        )
    cache = build_cache(config)
    allocator = cache.pools.kv_allocator
    times: dict[str, list[float]] = {"match_prefix": [], "insert": [], "evict": []}
    hit = total = 0
    clock = time.perf_counter_ns
    for tokens in chat_stream(num_requests):
        key = RadixKey(tokens).page_aligned(page_size)
        t0 = clock()
        m = cache.match_prefix(MatchPrefixParams(key))
        times["match_prefix"].append(clock() - t0)
        hit, total = hit + m.device_prefix_len, total + len(key)
        receipt = cache.inc_lock_ref(m.last_device_node)
        need = len(key) - m.device_prefix_len
        short = need - allocator.available_size()
        if short > 0:
            t0 = clock()
            cache.evict(EvictParams(num_tokens=short))
            times["evict"].append(clock() - t0)
        new = allocator.alloc(need)
        assert new is not None
        value = torch.cat([m.device_indices, new])
        t0 = clock()
        cache.insert(InsertParams(key, value, prev_prefix_len=m.device_prefix_len))
        times["insert"].append(clock() - t0)
        cache.dec_lock_ref(m.last_device_node, receipt)
        if host_tokens is not None:
            cache.host_tier.writing_check()  # untimed: the scheduler's drain point
    cache.check_invariants({"full": 0})
    out = {f"{op}_median_us": statistics.median(v) / 1000 for op, v in times.items() if v}
    out |= {f"{op}_p99_us": sorted(v)[int(len(v) * 0.99)] / 1000 for op, v in times.items() if v}
    out["hit_rate"] = hit / total
    out["cached_tokens"] = cache.total_size()
    out["evictions"] = len(times["evict"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--pool-tokens", type=int, default=100_000)
    parser.add_argument("--host-tokens", type=int, help="with an L2 host tier of this size")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {
        f"page_{ps}": run(ps, args.pool_tokens, args.requests, args.host_tokens) for ps in (1, 16)
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'config':8} {'match':>8} {'insert':>8} {'evict':>8}   (median µs)   hit rate  cached")
    for name, r in results.items():
        print(
            f"{name:8} {r['match_prefix_median_us']:8.1f} {r['insert_median_us']:8.1f} "
            f"{r['evict_median_us']:8.1f}   p99 {r['match_prefix_p99_us']:.0f}/"
            f"{r['insert_p99_us']:.0f}/{r['evict_p99_us']:.0f}   {r['hit_rate']:.3f}  "
            f"{r['cached_tokens']}"
        )


if __name__ == "__main__":
    main()
