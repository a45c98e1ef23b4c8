"""A request stream through SGLang's HiCache on a FULL+SWA cache (SWA host windows), recorded
call by call so two TreeCores can be compared.

SGLang's own `UnifiedRadixCache` and `HybridCacheController` (CPU copies, `sglang_hicache`)
back up each new leaf's full KV and the SWA window ending at it to the host pools, demote
backed-up device leaves under pressure (their SWA goes with them), tombstone SWA windows in
its SWA eviction walk (every few requests one runs on its own, so later matches end in
windows held on the host only), and load back a host hit's full KV and the SWA window its
match ends in. Some requests free the SWA of their own positions that left the window (the
insert names that floor) or release their SWA lock early, as decoding requests do. Every
request writes its own KV (a marker of its tokens) to a full-attention layer and to a
sliding-window layer, so a load-back is checked against what the requests wrote, on both.
"""

from __future__ import annotations

import random
from array import array
from typing import Any

import torch
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

from tests.integrations.sglang_hicache import component_tree_state, end_request, load_back
from tests.integrations.sglang_hybrid_stream import Pools, _alloc, leave_window

FULL, SWA = ComponentType.FULL, ComponentType.SWA


def stream(page_size: int, window: int, n: int, seed: int) -> list[list[int]]:
    """Requests that come back (a past one extended: often a host hit by then) or share a
    few prefixes; whole pages, from under one window to a few windows long."""
    rng = random.Random(seed)
    span = max(window // page_size, 1)
    pages = lambda k: [rng.randrange(1000) for _ in range(page_size * k)]  # noqa: E731
    prefixes = [pages(rng.randint(1, 2 * span)) for _ in range(4)]
    past: list[list[int]] = []
    out = []
    for _ in range(n):
        if past and rng.random() < 0.5:
            tokens = rng.choice(past) + pages(rng.randint(0, span))
        else:
            tokens = rng.choice(prefixes) + pages(rng.randint(1, 2 * span))
        past.append(tokens)
        out.append(tokens)
    return out


def marker(tokens: list[int]) -> torch.Tensor:
    """What a request writes as the KV of its tokens (small integers: exact in bf16)."""
    return torch.tensor([t % 200 + 1 for t in tokens], dtype=torch.float32)


class KvCheck:
    """The request's KV in one full-attention layer and one sliding-window layer."""

    def __init__(self, cache: Any, cfg: Any) -> None:
        self.allocator = cache.token_to_kv_pool_allocator
        kv = self.allocator.get_kvcache()
        full_layer = cfg.full_attention_layer_ids[0]
        swa_layer = next(i for i in range(cfg.num_layers) if i not in cfg.full_attention_layer_ids)
        self.full = kv.get_key_buffer(full_layer)
        self.swa = kv.get_key_buffer(swa_layer)
        self.window = cfg.sliding_window_size

    def write(self, slots: torch.Tensor, tokens: list[int]) -> None:
        values = marker(tokens)[:, None, None]
        self.full[slots] = values.to(self.full.dtype)
        self.swa[self.allocator.translate_loc_from_full_to_swa(slots)] = values.to(self.swa.dtype)

    def holds(self, prefix: torch.Tensor, tokens: list[int]) -> bool:
        """The prefix's full KV, and the SWA KV of its last window, are the requests'."""
        n = len(prefix)
        if not torch.equal(self.full[prefix][:, 0, 0].float(), marker(tokens[:n])):
            return False
        tail = prefix[max(n - self.window, 0) :]
        swa = self.allocator.translate_loc_from_full_to_swa(tail)
        return torch.equal(self.swa[swa][:, 0, 0].float(), marker(tokens[n - len(tail) : n]))


def play_swa_hicache(cache: Any, cfg: Any, n: int, seed: int) -> list[tuple]:
    """Match (loading host hits back), lock, evict what the pools lack, write the KV, insert,
    unlock; the backups are submitted and acked every other request (a scheduler step)."""
    pools, core, ps = Pools(cache), cache.tree_core, cfg.page_size
    host_pools = cache.cache_controller.mem_pool_host
    kv = KvCheck(cache, cfg)
    window = cfg.sliding_window_size
    rng = random.Random(seed + 1)
    trace: list[tuple] = []
    for i, tokens in enumerate(stream(ps, window, n, seed)):
        if i % 5 == 4:  # SGLang's SWA eviction on its own: tombstones inner windows
            r = cache.evict(EvictParams(swa_num_tokens=ps * rng.randint(1, 6)))
            trace.append(("evict", r.num_tokens_evicted, r.swa_num_tokens_evicted))
        if i % 7 == 6:  # SWA host pressure: host-only windows go, least recent first
            trace.append(("evict host", cache.evict_host(ps * rng.randint(1, 8), SWA)))
        key = RadixKey(array("q", tokens))
        m = cache.match_prefix(MatchPrefixParams(key=key))
        first = (m.device_prefix_len, m.host_hit_length, m.swa_host_hit_length,
                 m.swa_branching_seqlen, m.full_kv_hit_length)  # fmt: skip
        loaded = False
        # Most host hits load back; the rest the insert gives the request's own KV.
        if (m.host_hit_length or m.swa_host_hit_length) and rng.random() < 0.7:
            loaded = load_back(cache, m.best_match_node)
            m = cache.match_prefix(MatchPrefixParams(key=key))
        done = m.device_prefix_len
        prefix = cache.path_device_indices(m.last_device_node)[:done]
        kv_ok = kv.holds(prefix, tokens)
        lock = cache.lock(m.last_device_node)
        need = len(tokens) - done
        evicted = pools.make_room(cache, need)[:2]  # no states: full and SWA tokens
        new = _alloc(pools.kv, need, ps)
        if new is None:
            cache.unlock(lock)
            trace.append(("skip", first, evicted))
            continue
        kv.write(new, tokens[done:])
        value = torch.cat([prefix, new])
        params = InsertParams(key=key, value=value, prev_prefix_len=done,
                              swa_branching_seqlen=m.swa_branching_seqlen)  # fmt: skip
        leave_window(cache, pools, rng, lock, params, len(tokens), window, ps)
        r = cache.insert(params)
        end_request(cache, lock, i)
        trace.append(
            (
                first,
                loaded,
                kv_ok,
                done,
                prefix.tolist(),
                evicted,
                r.prefix_len,
                r.swa_branch_inserted,
                pools.left(),
                host_pools.available_size(),
                cache.evictable_size(),
                cache.protected_size(),
                core.component_evictable_size(SWA),
                core.component_protected_size(SWA),
                len(cache.ongoing_write_through),
            )
        )
    return trace


def swa_tree_state(cache: Any) -> list[tuple]:
    """Every node's root path with, for FULL and SWA, which tiers hold it and its locks."""
    return component_tree_state(cache, (FULL, SWA))
