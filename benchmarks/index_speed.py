"""KVEventIndex speed, on one core (CPU time of this process, so other load on the machine
does not count): events (and block operations, one per hash stored or
removed) applied per second from msgpack payloads, and the latency of a 32k-token lookup
across 16 instances (hashing the request's pages, then full prefix and resumable prefix
per instance). NVIDIA Dynamo's indexer (Rust, concurrent) reports 170M block ops/s; ours is
given in the same unit.

    .venv/bin/python -m benchmarks.index_speed            # writes results/index_speed.json

Each instance holds chains of 32k-token requests (page 16: 2,048 pages) sharing a prefix,
with SWA and Mamba groups (a window of 64 pages and a state every 64 pages) as a hybrid
publisher sends them; stores come in events of 64 pages, then some removes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from msgspec.structs import replace

from uniradix.events import BlockRemoved, BlockStored, decode_batch, encode_batch
from uniradix.events.index import KVEventIndex
from uniradix.events.types import KVEvent

RESULTS = Path(__file__).parent / "results" / "index_speed.json"
PAGE = 16
TOKENS = 32_768
INSTANCES = 16
DYNAMO_OPS = 170e6  # block ops/s, Dynamo's published figure for its Rust indexer


def instance_batches(index: KVEventIndex, prompts: list[list[int]]) -> list[bytes]:
    """Payloads that store `prompts` (full, SWA window, Mamba states) and remove a tail."""
    swa = {"group_idx": 1, "kv_cache_spec_kind": "sliding_window",
           "kv_cache_spec_sliding_window": 64 * PAGE}  # fmt: skip
    mamba = {"group_idx": 2, "kv_cache_spec_kind": "mamba"}
    payloads = []
    for tokens in prompts:
        hashes = index.page_hashes(tokens)
        events: list[KVEvent] = []
        for start in range(0, len(hashes), 64):
            chunk = hashes[start : start + 64]
            parent = hashes[start - 1] if start else None
            toks = tokens[start * PAGE : (start + len(chunk)) * PAGE]
            events.append(BlockStored(chunk, parent, toks, PAGE, None, "GPU", None))
            state = BlockStored([chunk[-1]], chunk[-2], toks[-PAGE:], PAGE, None, "GPU", None)
            events.append(replace(state, **mamba))
        window = hashes[-64:]
        live = BlockStored(window, hashes[-65], tokens[-64 * PAGE :], PAGE, None, "GPU", None)
        events.append(replace(live, **swa))
        events.append(BlockRemoved(hashes[-8:][::-1], "GPU"))
        payloads.append(encode_batch(events, 0.0, 0))
    return payloads


def measure(prompts_per_instance: int, lookups: int) -> dict[str, float]:
    rng = random.Random(0)
    index = KVEventIndex(block_size=PAGE)
    shared = [rng.randrange(50_000) for _ in range(TOKENS // 2)]
    work = []
    for i in range(INSTANCES):
        prompts = [shared + [rng.randrange(50_000) for _ in range(TOKENS // 2)]
                   for _ in range(prompts_per_instance)]  # fmt: skip
        work.append((f"instance-{i}", instance_batches(index, prompts), prompts))
    events = ops = 0
    t0 = time.process_time()
    for name, payloads, _ in work:
        for p in payloads:
            index.apply(name, p)
    apply_s = time.process_time() - t0
    for _, payloads, _ in work:  # count what was applied
        for p in payloads:
            for e in decode_batch(p).events:
                events += 1
                ops += len(getattr(e, "block_hashes", ()))
    hash_ms, match_ms = [], []
    for k in range(lookups):
        tokens = work[k % INSTANCES][2][0]
        t1 = time.process_time()
        hashes = index.page_hashes(tokens)
        t2 = time.process_time()
        index.prefix_lengths(tokens, hashes=hashes)
        index.resumable_lengths(tokens, hashes=hashes)
        t3 = time.process_time()
        hash_ms.append((t2 - t1) * 1e3)
        match_ms.append((t3 - t2) * 1e3)
    return {
        "instances": INSTANCES,
        "events": events,
        "block_ops": ops,
        "events_per_s": events / apply_s,
        "block_ops_per_s": ops / apply_s,
        "dynamo_block_ops_per_s": DYNAMO_OPS,
        "lookup_tokens": TOKENS,
        "lookup_hash_ms_median": statistics.median(hash_ms),
        "lookup_match_ms_median": statistics.median(match_ms),
        "lookup_total_ms_median": statistics.median(
            h + m for h, m in zip(hash_ms, match_ms, strict=True)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8, help="32k prompts per instance")
    parser.add_argument("--lookups", type=int, default=50)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    result = measure(args.prompts, args.lookups)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for key, value in result.items():
        print(f"{key}: {value:,.3f}" if isinstance(value, float) else f"{key}: {value}")


if __name__ == "__main__":
    main()
