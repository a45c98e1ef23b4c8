"""Run by `benchmarks.against_ref` under `PYTHONPATH=<a uniradix tree>`: builds a multi-turn
chat stream and a cache of that tree (public API only), then serves the parent in lock step.

Stream (argument 5): empty for the multi-turn chats below, or a side-by-side workload name
(`benchmarks/streams.py`: chat, fewshot, random, longchat, longdoc; one request at a time,
the side-by-side's pool: 65,536 tokens, 262,144 for longdoc), matched on its prompt and
inserted whole.

Configurations (argument 4): `full`; `full+swa` (window 128, an SWA pool as large as the full
one); `full+mamba` (512 state slots, checkpoint grid 64, extra buffer above page 1): each insert
publishes a fresh state slot, given back when the tree already had a state there, and a
request short of a state slot first evicts one (timed as `evict`), as in
`benchmarks/uniradix_side.py`.

Protocol (one line each way): the driver first prints `{"uniradix": <file>}`; then for every
line `N` read from stdin it replays the stream's next N requests and prints one JSON line
`{op: [[request index, ns], ...]}`; an empty line or EOF ends it. Timing uses
`time.perf_counter_ns` around each call (match and evict include building their params).
"""

import json
import random
import sys
import time

import torch

import uniradix
from uniradix import (
    CacheConfig,
    EvictParams,
    InsertParams,
    MatchPrefixParams,
    RadixKey,
    build_cache,
)

OPS = ("match", "lock", "insert", "unlock", "evict")


def chat_stream(page: int, requests: int, seed: int) -> tuple[list[list[int]], int]:
    """Requests of multi-turn chats (a shared system prompt, turns of 60-400 tokens), page
    aligned, and the number of distinct tokens they hold."""
    rng = random.Random(seed)
    system = [rng.randrange(1, 30000) for _ in range(1000)]
    chats: list[list[int]] = []
    stream = []
    distinct = len(system)
    for _ in range(requests):
        if not chats or rng.random() < 0.25:
            chats.append(list(system))
        chat = chats[rng.randrange(len(chats))]
        turn = [rng.randrange(1, 30000) for _ in range(rng.randint(60, 400))]
        chat += turn
        distinct += len(turn)
        stream.append(chat[: len(chat) // page * page])
    return stream, distinct


def sizes(config: str, page: int, pool: int) -> dict[str, object]:
    """CacheConfig fields beyond the full pool for `config`."""
    if config == "full":
        return {}
    if config == "full+swa":
        return {"sliding_window": 128, "swa_tokens": pool}
    if config == "full+mamba":
        return {
            "mamba_slots": 512,
            "mamba_extra_buffer": page > 1,
            "mamba_cache_chunk_size": 64,
        }
    raise ValueError(f"unknown config {config!r}")


def workload_stream(name: str, page: int, seed: int) -> tuple[list[tuple[int, list[int]]], int]:
    """A side-by-side stream (`benchmarks/streams.py`, of the tree under test), one request
    at a time: (prompt length, tokens floored to whole pages), and its pool size."""
    from benchmarks.streams import StreamSpec, requests  # the tree's own copy

    stream = [
        (r.prompt_len, r.tokens[: len(r.tokens) // page * page])
        for r in requests(StreamSpec(name, seed=seed))
    ]
    return stream, (1 << 18) if name == "longdoc" else 65536


def main() -> None:
    page, requests, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    config = sys.argv[4] if len(sys.argv) > 4 else "full"
    workload = sys.argv[5] if len(sys.argv) > 5 else ""
    if workload:
        stream, pool = workload_stream(workload, page, seed)
    else:
        chats, distinct = chat_stream(page, requests, seed)
        stream = [(len(tokens), tokens) for tokens in chats]
        pool = max(distinct // 4 // page * page, 4 * max(len(t) for t in chats))
    cache = build_cache(
        CacheConfig.of(full_tokens=pool, page_size=page, **sizes(config, page, pool))
    )
    alloc = cache.pools.kv_allocator
    states = cache.pools.mamba.allocator if cache.pools.mamba is not None else None
    swa = config == "full+swa"
    clock = time.perf_counter_ns
    print(json.dumps({"uniradix": uniradix.__file__, "requests": len(stream)}), flush=True)
    next_request = 0
    for line in sys.stdin:
        if not line.strip():
            break
        stop = min(next_request + int(line), len(stream))
        times: dict[str, list[tuple[int, int]]] = {op: [] for op in OPS}
        for i in range(next_request, stop):
            prompt_len, tokens = stream[i]
            key = RadixKey(tokens)
            prompt = key if prompt_len == len(tokens) else RadixKey(tokens[:prompt_len])
            t = clock()
            m = cache.match_prefix(MatchPrefixParams(prompt))
            times["match"].append((i, clock() - t))
            node = m.last_device_node
            t = clock()
            lock = cache.inc_lock_ref(node)
            times["lock"].append((i, clock() - t))
            need = len(tokens) - m.device_prefix_len
            free = cache.pools.available()
            short = EvictParams(
                num_tokens=max(0, need - free["full"]),
                swa_num_tokens=max(0, need - free["swa"]) if swa else 0,
                mamba_num=int(states is not None and free["mamba"] < 1),
            )
            if short != EvictParams():
                t = clock()
                cache.evict(short)
                times["evict"].append((i, clock() - t))
            new = alloc.alloc(need)
            if new is None:  # nothing left to evict (as a scheduler would, skip it)
                cache.dec_lock_ref(node, lock)
                continue
            state = states.alloc(1) if states is not None else None
            value = torch.cat([m.device_indices.to(torch.int64), new.to(torch.int64)])
            insert = InsertParams(
                key, value, prev_prefix_len=m.device_prefix_len, mamba_value=state
            )
            t = clock()
            result = cache.insert(insert)
            times["insert"].append((i, clock() - t))
            if states is not None and result.mamba_exist:
                states.free(state)
            t = clock()
            cache.dec_lock_ref(node, lock)
            times["unlock"].append((i, clock() - t))
        next_request = stop
        print(json.dumps(times), flush=True)


if __name__ == "__main__":
    main()
