"""A request stream that exercises SGLang's SWA and Mamba cache paths through its
`UnifiedRadixCache`, recorded call by call so two TreeCores can be compared.

Each request matches, locks its prefix, allocates KV and a Mamba state (evicting full KV, SWA
KV or states when short), sometimes frees the SWA slots of its own positions that left the
window (as a decoding request does; the insert then names that floor), sometimes releases its
SWA lock early (`release_swa`, SGLang's `dec_swa_lock_only`), inserts (handing its state back
when the node kept its own) and unlocks. Every few requests an SWA and a Mamba eviction run
on their own, which tombstone internal nodes, so later matches stop in gaps and later inserts
recover tombstones."""

from __future__ import annotations

import random
from array import array
from typing import Any

import torch
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

SWA, MAMBA = ComponentType.SWA, ComponentType.MAMBA


def stream(page_size: int, window: int, n: int, seed: int) -> list[list[int]]:
    """Requests sharing a few prefixes, each other's heads and whole earlier requests (chat
    turns, repeats); lengths in whole pages, from under one window to several."""
    rng = random.Random(seed)
    unit = max(page_size, 1)
    span = max(window // unit, 1)
    prefixes = [
        [rng.randrange(1000) for _ in range(unit * rng.randint(1, 3 * span))] for _ in range(4)
    ]
    done: list[list[int]] = []
    out = []
    for _ in range(n):
        roll = rng.random()
        if done and roll < 0.15:  # a request seen before, again
            tokens = list(rng.choice(done[-8:]))
        else:
            head = rng.choice(done[-8:]) if done and roll < 0.6 else rng.choice(prefixes)
            # Half the time a whole earlier request (the next turn of a chat), else a part.
            whole = rng.random() < 0.5
            cut = len(head) if whole else unit * rng.randint(1, max(len(head) // unit, 1))
            tail = [rng.randrange(1000) for _ in range(unit * rng.randint(1, 2 * span))]
            tokens = head[:cut] + tail
        done.append(tokens)
        out.append(tokens)
    return out


def _alloc(allocator: Any, need: int, page_size: int) -> torch.Tensor | None:
    if page_size == 1 or not hasattr(allocator, "full_attn_allocator"):
        return allocator.alloc(need)
    # The paged SWA allocator offers only the scheduler's alloc_extend; whole pages of both
    # halves plus the full->SWA mapping are the same allocation, by the allocator's own calls.
    if need > min(allocator.full_available_size(), allocator.swa_available_size()):
        return None
    full = allocator.full_attn_allocator.alloc(need)
    allocator.set_full_to_swa_mapping(full, allocator.swa_attn_allocator.alloc(need))
    return full


class Pools:
    """What a request takes from the cache's pools, and what they have left."""

    def __init__(self, cache: Any) -> None:
        self.kv = cache.token_to_kv_pool_allocator
        self.swa = hasattr(self.kv, "swa_available_size")
        self.mamba = getattr(cache.req_to_token_pool, "mamba_allocator", None)

    def shortfall(self, need: int) -> EvictParams:
        full = self.kv.full_available_size() if self.swa else self.kv.available_size()
        swa = self.kv.swa_available_size() if self.swa else need
        states = int(self.mamba is not None and self.mamba.available_size() < 1)
        return EvictParams(num_tokens=max(need - full, 0), swa_num_tokens=max(need - swa, 0),
                           mamba_num=states)  # fmt: skip

    def make_room(self, cache: Any, need: int) -> tuple[int, int, int]:
        """Evicts what the pools lack for `need` tokens and a state, as SGLang's scheduler
        does: the full tokens, SWA tokens and states evicted."""
        short = self.shortfall(need)
        if not (short.num_tokens or short.swa_num_tokens or short.mamba_num):
            return 0, 0, 0
        r = cache.evict(short)
        return r.num_tokens_evicted, r.swa_num_tokens_evicted, r.mamba_num_evicted

    def left(self) -> tuple[int, ...]:
        sizes = [self.kv.available_size()]
        if self.swa:
            sizes.append(self.kv.swa_available_size())
        if self.mamba is not None:
            sizes.append(self.mamba.available_size())
        return tuple(sizes)


def leave_window(
    cache: Any,
    pools: Pools,
    rng: random.Random,
    lock: Any,
    params: Any,
    length: int,
    window: int,
    page_size: int,
) -> None:
    """What a decoding request does with its SWA: sometimes it has freed the SWA of its own
    positions that left the window (the insert `params` then name that floor), sometimes it
    releases its SWA lock early (`release_swa`, SGLang's `dec_swa_lock_only`)."""
    done, value = params.prev_prefix_len, params.value
    floor = (length - window - rng.randint(0, 2 * page_size)) // page_size * page_size
    if floor > done and rng.random() < 0.5:
        pools.kv.free_swa_segment(value[done:floor], start_pos=done)
        params.set_evicted_seqlen(SWA, floor)
    if rng.random() < 0.3:
        cache.release_swa(lock)


def evict_aux_alone(
    cache: Any, pools: Pools, rng: random.Random, page_size: int, least: int, most: int
) -> tuple:
    """SGLang's SWA eviction (1-6 pages, on an SWA cache) and Mamba eviction (`least` to
    `most` states) on their own, which tombstone inner nodes: ("evict", full tokens, SWA
    tokens, states) evicted."""
    swa = page_size * rng.randint(1, 6) if pools.swa else 0
    r = cache.evict(EvictParams(swa_num_tokens=swa, mamba_num=rng.randint(least, most)))
    return "evict", r.num_tokens_evicted, r.swa_num_tokens_evicted, r.mamba_num_evicted


def play_hybrid(cache: Any, page_size: int, window: int | None, n: int, seed: int) -> list[tuple]:
    """`window`: the SWA window (None: no SWA; the stream then spans 4 pages per window)."""
    pools, core = Pools(cache), cache.tree_core
    span = window or 4 * page_size
    rng = random.Random(seed + 1)
    trace: list[tuple] = []
    for i, tokens in enumerate(stream(page_size, span, n, seed)):
        if i % 5 == 4:
            trace.append(evict_aux_alone(cache, pools, rng, page_size, 0, 2))
        key = RadixKey(array("q", tokens))
        m = cache.match_prefix(MatchPrefixParams(key=key))
        done = m.device_prefix_len
        prefix = cache.path_device_indices(m.last_device_node)[:done]
        lock = cache.lock(m.last_device_node)
        need = len(tokens) - done
        evicted = pools.make_room(cache, need)
        new = _alloc(pools.kv, need, page_size)
        state = None if pools.mamba is None or new is None else pools.mamba.alloc(1)
        if new is None or (pools.mamba is not None and state is None):
            # everything else is locked or the pool is too small: skip
            if new is not None:
                pools.kv.free(new)
            cache.unlock(lock)
            trace.append(("skip", done, evicted))
            continue
        value = torch.cat([prefix, new])
        params = InsertParams(key=key, value=value, prev_prefix_len=done, mamba_value=state,
                              swa_branching_seqlen=m.swa_branching_seqlen)  # fmt: skip
        if pools.swa:
            leave_window(cache, pools, rng, lock, params, len(tokens), span, page_size)
        r = cache.insert(params)
        if state is not None and r.mamba_exist:  # the node kept its own state
            pools.mamba.free(state)
        cache.unlock(lock)
        core.sanity_check([], [])
        trace.append(
            (
                done,
                prefix.tolist(),
                m.swa_branching_seqlen,
                evicted,
                r.prefix_len,
                r.swa_branch_inserted,
                m.mamba_branching_seqlen,
                r.mamba_exist,
                pools.left(),
                cache.evictable_size(),
                cache.protected_size(),
                tuple(core.component_evictable_size(ct) for ct in (SWA, MAMBA)),
                tuple(core.component_protected_size(ct) for ct in (SWA, MAMBA)),
            )
        )
    return trace
