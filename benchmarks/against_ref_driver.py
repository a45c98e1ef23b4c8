"""Run by `benchmarks.against_ref` under `PYTHONPATH=<a uniradix tree>`: replays a multi-turn
chat stream through that tree's cache (public API only) and prints each op's median (us)."""

import json
import random
import sys
import time

import numpy as np
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


def main() -> None:
    page, requests, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
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
    pool = max(distinct // 4 // page * page, 4 * max(map(len, stream)))
    cache = build_cache(CacheConfig(full_tokens=pool, page_size=page))
    alloc = cache.pools.kv_allocator
    times: dict[str, list[int]] = {op: [] for op in ("match", "lock", "insert", "unlock", "evict")}
    clock = time.perf_counter_ns
    for tokens in stream:
        key = RadixKey(tokens)
        t = clock()
        m = cache.match_prefix(MatchPrefixParams(key))
        times["match"].append(clock() - t)
        t = clock()
        lock = cache.inc_lock_ref(m.last_device_node)
        times["lock"].append(clock() - t)
        need = len(tokens) - m.device_prefix_len
        if alloc.available_size() < need:
            t = clock()
            cache.evict(EvictParams(num_tokens=need - alloc.available_size()))
            times["evict"].append(clock() - t)
        new = alloc.alloc(need)
        value = torch.cat([m.device_indices.to(torch.int64), new.to(torch.int64)])
        params = InsertParams(key, value, prev_prefix_len=m.device_prefix_len)
        t = clock()
        cache.insert(params)
        times["insert"].append(clock() - t)
        t = clock()
        cache.dec_lock_ref(m.last_device_node, lock)
        times["unlock"].append(clock() - t)
    medians = {op: float(np.median(v)) / 1e3 if v else None for op, v in times.items()}
    print(json.dumps({**medians, "uniradix": uniradix.__file__}))


if __name__ == "__main__":
    main()
