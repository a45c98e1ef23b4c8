"""Scale benchmark: match and insert latency against trees of 10k, 100k and 1M cached tokens.

For each tree size N (page 1, a pool with room to spare, so nothing is evicted), the cache is
filled with two 4096-token probe sequences and unrelated 256-token sequences up to N tokens
(about N / 256 leaves under the root). Then, for each key length L:

- match: the first L tokens of a probe plus one token the tree lacks, so the walk covers L
  tokens and stops inside the probe's edge;
- insert: the first L tokens of a probe plus 16 new tokens (value = the matched slots + 16
  fresh ones, `prev_prefix_len = L`): a walk of L tokens, one split, one new leaf.

Only the `match_prefix` / `insert` call is timed. If cost follows the key, a row's latency
grows with L and stays flat across N. The same code drives both sides through their adapter.

Memory of the tree's bookkeeping: the fill runs with the pools already built, and each row
reports per cached token (a) the Python heap it grew by (`tracemalloc`: nodes, keys, numpy
slot arrays; blind to torch storage and to native heaps such as SGLang's Rust core) and
(b) the process's resident memory growth, which sees native heaps too and is the figure to
compare across sides (coarse: pages of 4 KiB, allocator slack).
"""

from __future__ import annotations

import gc
import random
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.ops import CacheAdapter, _rss_bytes, summarize

FILL_SEQ_TOKENS = 256
PROBE_TOKENS = 4096
NUM_PROBES = 2
NEW_TOKENS = 16
MISSING_TOKEN = 1 << 40


def _insert(adapter: CacheAdapter, tokens: list[int]) -> int:
    """Inserts `tokens` (reusing any cached prefix); returns the insert's time in ns."""
    result = adapter.cache.match_prefix(adapter.match_params(tokens))
    matched, node = adapter.matched(result)
    prefix = adapter.prefix_indices(result, node, matched)
    slots = adapter.alloc(len(tokens) - matched)
    if slots is None:
        raise ValueError(f"scale benchmark pool too small for {len(tokens)} more tokens")
    params = adapter.insert_params(tokens, torch.cat([prefix, slots]), matched, None)
    t0 = time.perf_counter_ns()
    adapter.cache.insert(params)
    return time.perf_counter_ns() - t0


def run_scale(make_adapter: Callable[[int], CacheAdapter], job: dict[str, Any]) -> dict[str, Any]:
    sizes = job.get("sizes", [10_000, 100_000, 1_000_000])
    key_lens = job.get("key_lens", [64, 512, 4096])
    queries = job.get("queries", 100)
    rows = []
    for size in sizes:
        rng = random.Random(size)
        slack = NUM_PROBES * PROBE_TOKENS + len(key_lens) * queries * NEW_TOKENS
        adapter = make_adapter(size + slack)
        probes = [[rng.randrange(32000) for _ in range(PROBE_TOKENS)] for _ in range(NUM_PROBES)]
        gc.collect()
        rss0 = _rss_bytes()
        tracemalloc.start()
        heap0 = tracemalloc.get_traced_memory()[0]
        for probe in probes:
            _insert(adapter, probe)
        for _ in range(max(0, size - NUM_PROBES * PROBE_TOKENS) // FILL_SEQ_TOKENS):
            _insert(adapter, [rng.randrange(32000) for _ in range(FILL_SEQ_TOKENS)])
        gc.collect()
        heap = tracemalloc.get_traced_memory()[0] - heap0
        tracemalloc.stop()
        rss = _rss_bytes() - rss0
        tree_tokens = adapter.cached_tokens()
        fresh = iter(range(1 << 41, 1 << 42))
        for key_len in key_lens:
            times: dict[str, list[int]] = {"match": [], "insert": []}
            for q in range(queries):
                probe = probes[q % NUM_PROBES]
                params = adapter.match_params([*probe[:key_len], MISSING_TOKEN])
                t0 = time.perf_counter_ns()
                adapter.cache.match_prefix(params)
                times["match"].append(time.perf_counter_ns() - t0)
                new = [next(fresh) for _ in range(NEW_TOKENS)]
                times["insert"].append(_insert(adapter, probe[:key_len] + new))
            stats = summarize(times)
            rows.append(
                {
                    "tree_tokens": tree_tokens,
                    "key_len": key_len,
                    "heap_bytes_per_token": heap / tree_tokens,
                    "rss_bytes_per_token": rss / tree_tokens,
                    **{f"{op}_{k}": stats[op][k] for op in stats for k in ("median_us", "p99_us")},
                }
            )
        adapter.check()
    return {"rows": rows}
