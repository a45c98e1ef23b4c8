"""Run by `benchmarks.against_ref` under `PYTHONPATH=<a uniradix tree>`: builds a multi-turn
chat stream and a cache of that tree (public API only), then serves the parent in lock step.

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


def main() -> None:
    page, requests, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    stream, distinct = chat_stream(page, requests, seed)
    pool = max(distinct // 4 // page * page, 4 * max(map(len, stream)))
    cache = build_cache(CacheConfig(full_tokens=pool, page_size=page))
    alloc = cache.pools.kv_allocator
    clock = time.perf_counter_ns
    print(json.dumps({"uniradix": uniradix.__file__}), flush=True)
    next_request = 0
    for line in sys.stdin:
        if not line.strip():
            break
        stop = min(next_request + int(line), len(stream))
        times: dict[str, list[tuple[int, int]]] = {op: [] for op in OPS}
        for i in range(next_request, stop):
            tokens = stream[i]
            key = RadixKey(tokens)
            t = clock()
            m = cache.match_prefix(MatchPrefixParams(key))
            times["match"].append((i, clock() - t))
            node = m.last_device_node
            t = clock()
            lock = cache.inc_lock_ref(node)
            times["lock"].append((i, clock() - t))
            need = len(tokens) - m.device_prefix_len
            if alloc.available_size() < need:
                t = clock()
                cache.evict(EvictParams(num_tokens=need - alloc.available_size()))
                times["evict"].append((i, clock() - t))
            new = alloc.alloc(need)
            value = torch.cat([m.device_indices.to(torch.int64), new.to(torch.int64)])
            insert = InsertParams(key, value, prev_prefix_len=m.device_prefix_len)
            t = clock()
            cache.insert(insert)
            times["insert"].append((i, clock() - t))
            t = clock()
            cache.dec_lock_ref(node, lock)
            times["unlock"].append((i, clock() - t))
        next_request = stop
        print(json.dumps(times), flush=True)


if __name__ == "__main__":
    main()
