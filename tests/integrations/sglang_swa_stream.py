"""A request stream that exercises SGLang's SWA cache paths through its `UnifiedRadixCache`,
recorded call by call so two TreeCores can be compared.

Each request matches, locks its prefix, allocates (evicting full or SWA KV when short),
sometimes frees the SWA slots of its own positions that left the window (as a decoding
request does; the insert then names that floor), sometimes releases its SWA lock early
(`release_swa`, SGLang's `dec_swa_lock_only`), inserts and unlocks. Every few requests an SWA
eviction runs on its own, which tombstones internal nodes, so later matches stop in gaps and
later inserts recover tombstones."""

from __future__ import annotations

import random
from array import array
from typing import Any

import torch
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType


def stream(page_size: int, window: int, n: int, seed: int) -> list[list[int]]:
    """Requests sharing a few prefixes and each other's heads; lengths in whole pages, from
    under one window to several."""
    rng = random.Random(seed)
    unit = max(page_size, 1)
    span = max(window // unit, 1)
    prefixes = [
        [rng.randrange(1000) for _ in range(unit * rng.randint(1, 3 * span))] for _ in range(4)
    ]
    done: list[list[int]] = []
    out = []
    for _ in range(n):
        head = rng.choice(prefixes + done[-8:]) if done and rng.random() < 0.5 else None
        head = head if head is not None else rng.choice(prefixes)
        cut = unit * rng.randint(1, max(len(head) // unit, 1))
        tail = [rng.randrange(1000) for _ in range(unit * rng.randint(1, 2 * span))]
        tokens = head[:cut] + tail
        done.append(tokens)
        out.append(tokens)
    return out


def _alloc(allocator: Any, need: int, page_size: int) -> torch.Tensor | None:
    if page_size == 1:
        return allocator.alloc(need)
    # The paged SWA allocator offers only the scheduler's alloc_extend; whole pages of both
    # halves plus the full->SWA mapping are the same allocation, by the allocator's own calls.
    if need > min(allocator.full_available_size(), allocator.swa_available_size()):
        return None
    full = allocator.full_attn_allocator.alloc(need)
    allocator.set_full_to_swa_mapping(full, allocator.swa_attn_allocator.alloc(need))
    return full


def play_swa(cache: Any, page_size: int, window: int, n: int, seed: int) -> list[tuple]:
    allocator = cache.token_to_kv_pool_allocator
    rng = random.Random(seed + 1)
    trace: list[tuple] = []
    for i, tokens in enumerate(stream(page_size, window, n, seed)):
        if i % 5 == 4:
            swa = cache.evict(EvictParams(swa_num_tokens=page_size * rng.randint(1, 6)))
            trace.append(("swa-evict", swa.num_tokens_evicted, swa.swa_num_tokens_evicted))
        key = RadixKey(array("q", tokens))
        m = cache.match_prefix(MatchPrefixParams(key=key))
        done = m.device_prefix_len
        prefix = cache.path_device_indices(m.last_device_node)[:done]
        lock = cache.lock(m.last_device_node)
        need = len(tokens) - done
        short_full = need - allocator.full_available_size()
        short_swa = need - allocator.swa_available_size()
        evicted = (0, 0)
        if short_full > 0 or short_swa > 0:
            r = cache.evict(
                EvictParams(num_tokens=max(short_full, 0), swa_num_tokens=max(short_swa, 0))
            )
            evicted = (r.num_tokens_evicted, r.swa_num_tokens_evicted)
        new = _alloc(allocator, need, page_size)
        if new is None:  # everything else is locked or the pool is too small: skip
            cache.unlock(lock)
            trace.append(("skip", done, evicted))
            continue
        value = torch.cat([prefix, new])
        params = InsertParams(
            key=key, value=value, prev_prefix_len=done, swa_branching_seqlen=m.swa_branching_seqlen
        )
        # A request whose window moved past some of its own positions freed their SWA slots.
        floor = (len(tokens) - window - rng.randint(0, 2 * page_size)) // page_size * page_size
        if floor > done and rng.random() < 0.5:
            allocator.free_swa_segment(value[done:floor], start_pos=done)
            params.set_evicted_seqlen(ComponentType.SWA, floor)
        if rng.random() < 0.3:
            cache.release_swa(lock)
        r = cache.insert(params)
        cache.unlock(lock)
        cache.tree_core.sanity_check([], [])
        trace.append(
            (
                done,
                prefix.tolist(),
                m.swa_branching_seqlen,
                evicted,
                r.prefix_len,
                r.swa_branch_inserted,
                allocator.full_available_size(),
                allocator.swa_available_size(),
                cache.evictable_size(),
                cache.protected_size(),
                cache.tree_core.swa_evictable_size(),
                cache.tree_core.swa_protected_size(),
            )
        )
    return trace
