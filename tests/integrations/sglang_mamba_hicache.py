"""A request stream through SGLang's HiCache on a cache with Mamba states (Mamba host states),
recorded call by call so two TreeCores can be compared.

SGLang's own `UnifiedRadixCache` and `HybridCacheController` (CPU copies, `sglang_hicache`)
back up each new leaf's full KV and Mamba state to the host pools, demote backed-up device
leaves under pressure (their states go with them), tombstone inner states in its Mamba
eviction walk (every few requests one runs on its own, so later matches end at states held
on the host only), evict host-only states and host leaves under host pressure (sometimes with
the matched node's host copies pinned by a host lock), and load back a host hit's full KV and
the state its match ends at. On a FULL+SWA+Mamba cache SGLang's SWA eviction and SWA host
eviction run too, with the SWA window moves of decoding requests (`leave_window`), as in the
SWA HiCache stream. Every request writes its own KV and its final Mamba state (a
marker of its tokens), so what a match finds on the device, loaded back or not, is checked
against what the requests wrote. At the end everything is evicted from both tiers, and every
pool must be whole again (nothing leaked).
"""

from __future__ import annotations

import random
from array import array
from types import SimpleNamespace
from typing import Any

import torch
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.hicache_storage import PoolName
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

from tests.integrations.sglang_hicache import component_tree_state, end_request, load_back
from tests.integrations.sglang_hybrid_stream import Pools, _alloc, evict_aux_alone, leave_window
from tests.integrations.sglang_swa_hicache import stream

FULL, SWA, MAMBA = ComponentType.FULL, ComponentType.SWA, ComponentType.MAMBA
ALL = 10**9


def marker(tokens: list[int]) -> torch.Tensor:
    """What a request writes as the KV of its tokens (small integers: exact in bf16)."""
    return torch.tensor([t % 200 + 1 for t in tokens], dtype=torch.float32)


def state_marker(tokens: list[int]) -> float:
    """What a request writes as its Mamba state after `tokens` (an integer exact in bf16)."""
    return float((sum(tokens) * 31 + len(tokens)) % 251 + 1)


class StateCheck:
    """The request's KV in one full-attention layer and its Mamba state (temporal part)."""

    def __init__(self, cache: Any, cfg: Any) -> None:
        kv = cache.token_to_kv_pool_allocator.get_kvcache()
        self.full = kv.get_key_buffer(cfg.full_attention_layer_ids[0])
        self.states = cache.req_to_token_pool.mamba_pool.mamba_cache.temporal
        self.core = cache.tree_core

    def write(self, slots: torch.Tensor, state: torch.Tensor, tokens: list[int], done: int) -> None:
        self.full[slots] = marker(tokens[done:])[:, None, None].to(self.full.dtype)
        self.states[:, state] = state_marker(tokens)

    def holds(self, prefix: torch.Tensor, node: Any, tokens: list[int]) -> tuple[bool, bool]:
        """Whether the prefix's full KV, and the state of the node it ends at, are the
        requests' (a match ends on the device only at a node with its state there)."""
        n = len(prefix)
        kv_ok = torch.equal(self.full[prefix][:, 0, 0].float(), marker(tokens[:n]))
        if n == 0:
            return kv_ok, True
        slot = self.core.get_component_device_value(node, MAMBA)
        state = self.states[:, slot].float()
        return kv_ok, bool(torch.all(state == state_marker(tokens[:n])))

    def same_state(self, node: Any, slot: torch.Tensor) -> bool:
        """Whether the request's own slot got the state the node has on the device."""
        node_slot = self.core.get_component_device_value(node, MAMBA).view(-1)
        return torch.equal(self.states[:, slot.view(-1)], self.states[:, node_slot])


def host_sizes(cache: Any) -> tuple[int, int]:
    """Free slots of the host pools: full KV, Mamba states."""
    states = cache.host_pool_group.get_pool(PoolName.MAMBA)
    return cache.cache_controller.mem_pool_host.available_size(), states.available_size()


def play_mamba_hicache(cache: Any, cfg: Any, n: int, seed: int) -> list[tuple]:
    """Match (loading host hits back), lock, evict what the pools lack, write the KV and the
    state, insert (handing the state back when the node kept its own), unlock; the backups
    are submitted and acked every other request (a scheduler step)."""
    pools, core, ps = Pools(cache), cache.tree_core, cfg.page_size
    check = StateCheck(cache, cfg)
    rng = random.Random(seed + 1)
    trace: list[tuple] = []
    # Requests of a few pages (one page each at the largest page sizes, for the kit's pools).
    span = ps * (4 if ps <= 16 else 1)
    for i, tokens in enumerate(stream(ps, span, n, seed)):
        if i % 5 == 4:  # SGLang's Mamba (and SWA) eviction on its own: inner tombstones
            trace.append(evict_aux_alone(cache, pools, rng, ps, 1, 4))
        key = RadixKey(array("q", tokens))
        m = cache.match_prefix(MatchPrefixParams(key=key))
        first = (m.device_prefix_len, m.host_hit_length, m.mamba_host_hit_length,
                 m.mamba_branching_seqlen, m.full_kv_hit_length, m.swa_host_hit_length,
                 m.swa_branching_seqlen)  # fmt: skip
        if i % 7 == 6:  # host pressure, with the matched copies pinned or not
            pinned = rng.random() < 0.5 and not core.is_root(m.best_match_node)
            receipt = cache.inc_host_lock_ref(m.best_match_node) if pinned else None
            freed = cache.evict_host(ps * rng.randint(1, 4)), cache.evict_host(2, MAMBA)
            if pools.swa:
                freed += (cache.evict_host(ps * rng.randint(1, 4), SWA),)
            if receipt is not None:
                cache.dec_host_lock_ref(m.best_match_node, receipt.to_dec_params())
            trace.append(("evict host", pinned, freed))
            m = cache.match_prefix(MatchPrefixParams(key=key))
        loaded, own_state = False, None
        # Most host hits load back, some for a request that takes the state into its own
        # slot too; the rest the insert gives the request's own KV.
        hit = m.host_hit_length or m.mamba_host_hit_length or m.swa_host_hit_length
        if hit and rng.random() < 0.8:
            req = SimpleNamespace(kv=SimpleNamespace(holds_mamba=False, mamba_pool_idx=None))
            anchor = m.best_match_node
            loaded = load_back(cache, anchor, req if rng.random() < 0.5 else None)
            slot = req.kv.mamba_pool_idx
            if slot is not None:  # the request's copy of the state, then the request ends
                own_state = check.same_state(anchor, slot)
                pools.mamba.free(slot.unsqueeze(0))
            m = cache.match_prefix(MatchPrefixParams(key=key))
        done = m.device_prefix_len
        prefix = cache.path_device_indices(m.last_device_node)[:done]
        kv_ok, state_ok = check.holds(prefix, m.last_device_node, tokens)
        lock = cache.lock(m.last_device_node)
        need = len(tokens) - done
        evicted = pools.make_room(cache, need)
        new = _alloc(pools.kv, need, ps)
        state = None if new is None else pools.mamba.alloc(1)
        if new is None or state is None:  # everything else is locked: skip
            if new is not None:
                pools.kv.free(new)
            cache.unlock(lock)
            trace.append(("skip", first, evicted))
            continue
        check.write(new, state, tokens, done)
        value = torch.cat([prefix, new])
        params = InsertParams(key=key, value=value, prev_prefix_len=done, mamba_value=state,
                              swa_branching_seqlen=m.swa_branching_seqlen)  # fmt: skip
        if pools.swa:
            leave_window(cache, pools, rng, lock, params, len(tokens), cfg.sliding_window_size, ps)
        r = cache.insert(params)
        if r.mamba_exist:  # the node kept its own state
            pools.mamba.free(state)
        end_request(cache, lock, i)
        trace.append(
            (
                first,
                loaded,
                own_state,
                kv_ok,
                state_ok,
                done,
                prefix.tolist(),
                evicted,
                r.prefix_len,
                r.mamba_exist,
                pools.left(),
                host_sizes(cache),
                cache.evictable_size(),
                cache.protected_size(),
                core.component_evictable_size(MAMBA),
                core.component_protected_size(MAMBA),
                len(cache.ongoing_write_through),
                r.swa_branch_inserted,
                core.component_evictable_size(SWA),
                core.component_protected_size(SWA),
            )
        )
    return trace


def drain(cache: Any) -> tuple[tuple[int, ...], tuple[int, int]]:
    """Every backup acked, then everything evicted from the device and the host: the pools'
    free sizes (device, host), each whole again unless something leaked."""
    cache.writing_check(write_back=True)
    cache.evict(EvictParams(num_tokens=ALL, mamba_num=ALL))
    cache.evict_host(ALL, MAMBA)
    cache.evict_host(ALL)
    cache.tree_core.sanity_check([], [])
    return Pools(cache).left(), host_sizes(cache)


def mamba_tree_state(cache: Any) -> list[tuple]:
    """Every node's root path with, for FULL and Mamba, which tiers hold it and its locks."""
    return component_tree_state(cache, (FULL, MAMBA))
