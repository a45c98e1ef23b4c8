"""Mamba request flow through the cache: copy-on-write, branching, ping-pong checkpoints,
donation, release; and random scheduler runs checked after every step.

`Sched` drives the cache exactly as the protocol in `uniradix.cache_mamba` says, with a fake
one-layer SSM whose temporal state after a prefix is `state_of(prefix)` (a rolling hash
updated token by token from the request's working slot) and whose conv state is the last
token. So every state the tree or a request holds can be checked against its prefix.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from uniradix import CacheConfig, EvictParams, MatchPrefixParams, MatchResult, Req, build_cache
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.cache.mamba_requests import MambaRequests
from uniradix.components.mamba import MambaComponent
from uniradix.memory.mamba_pool import MambaReqPool
from uniradix.tree.node import TreeNode
from uniradix.types import ComponentType

MOD = 65521


def step(h: int, token: int) -> int:
    return (h * 31 + token) % MOD


def state_of(tokens: list[int]) -> int:
    h = 0
    for t in tokens:
        h = step(h, t)
    return h


def make(page_size: int = 1, mamba_slots: int = 16, **kw: object) -> UnifiedRadixCache:
    sizes: dict[str, object] = {
        "full_tokens": 256,
        "max_context_len": 256,
        "max_running_requests": 8,
    }
    sizes.update(kw)
    config = CacheConfig.of(
        page_size=page_size,
        mamba_slots=mamba_slots,
        mamba_extra_buffer=page_size > 1,
        num_mamba_layers=1,
        **sizes,  # type: ignore[arg-type]
    )
    return build_cache(config)


class Sched:
    def __init__(self, cache: UnifiedRadixCache) -> None:
        assert isinstance(cache.mamba_requests, MambaRequests) and cache.pools.mamba is not None
        self.cache = cache
        self.flow: MambaRequests = cache.mamba_requests
        self.pool: MambaReqPool = cache.pools.mamba
        self.rows = cache.pools.req_to_token_pool
        self.running: list[Req] = []

    def temporal(self, slot: int) -> int:
        return int(self.pool.states.temporal_states[0, slot, 0])

    def admit(self, tokens: list[int]) -> tuple[Req, MatchResult] | None:
        cache, req = self.cache, Req(list(tokens))
        r = cache.match_prefix(MatchPrefixParams(cache.make_key(tokens), req=req))
        if req.mamba_pool_idx is None:
            return None
        row = self.rows.alloc()
        if row is None:
            cache.release_req_slots(req)
            return None
        req.req_pool_idx = row
        self.rows.write(row, 0, r.device_indices)
        req.lock = cache.inc_lock_ref(r.last_device_node)
        req.last_node = r.last_device_node
        req.cache_protected_len = req.kv_committed_len = r.device_prefix_len
        req.kv_allocated_len = r.device_prefix_len
        self.running.append(req)
        return req, r

    def forward(self, req: Req, end: int) -> bool:
        """Computes `token_ids[kv_committed_len:end]`: KV slots, state, tracked state."""
        cache, ps = self.cache, self.cache.page_size
        start = req.kv_committed_len
        assert req.req_pool_idx is not None and req.mamba_pool_idx is not None
        need = -(-end // ps) * ps - req.kv_allocated_len
        if need > 0:
            short = need - cache.pools.kv_allocator.available_size()
            if short > 0:
                cache.evict(EvictParams(num_tokens=short))
            slots = cache.pools.kv_allocator.alloc(need)
            if slots is None:
                return False
            self.rows.write(req.req_pool_idx, req.kv_allocated_len, slots)
            req.kv_allocated_len += need
        track = self.flow.checkpoint_seqlen(start, end) if self.pool.extra_buffer else None
        h = self.temporal(req.mamba_pool_idx)
        for pos in range(start, end):
            h = step(h, req.token_ids[pos])
            if pos + 1 == track:
                slot = self.flow.track_slot(req)
                if slot is not None:  # None: the pool is short, the track is skipped
                    self.write(slot, h, req.token_ids[pos])
                self.flow.commit_track(req, track)
        self.write(req.mamba_pool_idx, h, req.token_ids[end - 1])
        req.kv_committed_len = end
        return True

    def write(self, slot: int, h: int, last_token: int) -> None:
        self.pool.states.temporal_states[0, slot, 0] = h
        self.pool.states.conv_states[0, slot, 0] = last_token

    def chunk(self, req: Req, end: int) -> bool:
        if not self.forward(req, end):
            return False
        self.cache.cache_unfinished_req(req)
        return True

    def finish(self, req: Req, is_insert: bool = True) -> None:
        self.cache.cache_finished_req(req, is_insert)
        self.running.remove(req)

    def held(self, matched: list[Req]) -> dict[str, int]:
        return {
            "full": sum(r.kv_allocated_len - r.cache_protected_len for r in self.running),
            "mamba": sum(len(self.pool.held_slots(r)) for r in self.running + matched),
            "req": len(self.running),
        }

    def check(self, matched: tuple[Req, ...] = ()) -> None:
        """Every invariant, with `matched` requests holding slots but not admitted."""
        self.cache.check_invariants(self.held(list(matched)))
        mamba = self.cache.component(ComponentType.MAMBA)
        assert isinstance(mamba, MambaComponent)
        for node in self.cache.tree.nodes():
            slot = mamba.slot(node)
            if slot is not None:
                assert self.temporal(slot) == state_of(path_tokens(node)), node
        for req in self.running:
            assert req.mamba_pool_idx is not None
            want = state_of(req.token_ids[: req.kv_committed_len])
            assert self.temporal(req.mamba_pool_idx) == want

    def slot_at(self, tokens: list[int]) -> int | None:
        r = self.cache.match_prefix(MatchPrefixParams(self.cache.make_key(tokens)))
        assert r.device_prefix_len == len(tokens)
        mamba = self.cache.component(ComponentType.MAMBA)
        assert isinstance(mamba, MambaComponent)
        return mamba.slot(r.last_device_node)


def path_tokens(node: TreeNode) -> list[int]:
    keys = []
    while node.parent is not None:
        keys.append(node.key)
        node = node.parent
    return np.frombuffer(b"".join(reversed(keys)), dtype="<i8").tolist()


def admitted(sched: Sched, tokens: list[int]) -> tuple[Req, MatchResult]:
    result = sched.admit(tokens)
    assert result is not None
    return result


# ---------------------------------------------------------------------- scenarios
def test_cow_copies_the_state_and_leaves_the_source_intact() -> None:
    sched = Sched(make())
    a, _ = admitted(sched, list(range(1, 9)))
    assert a.mamba_pool_idx == 1
    sched.forward(a, 8)
    sched.finish(a)
    assert sched.slot_at(list(range(1, 9))) == 1  # the working slot was donated
    b, r = admitted(sched, [*range(1, 9), 9, 10])
    assert (r.device_prefix_len, b.mamba_pool_idx) == (8, 2)
    states = sched.pool.states
    assert torch.equal(states.temporal_states[:, 2], states.temporal_states[:, 1])
    assert torch.equal(states.conv_states[:, 2], states.conv_states[:, 1])
    sched.forward(b, 10)
    assert sched.temporal(2) == state_of([*range(1, 9), 9, 10])
    assert sched.temporal(1) == state_of(list(range(1, 9)))  # never written
    sched.check()
    sched.finish(b)
    sched.check()


def test_match_falls_back_to_deepest_state_and_branching_gets_checkpointed() -> None:
    sched = Sched(make(mamba_cache_chunk_size=2))
    a, _ = admitted(sched, list(range(1, 9)))
    sched.chunk(a, 4)  # a copy of the working slot 1 goes to the tree at 4
    sched.forward(a, 8)
    sched.finish(a)  # slot 1 itself goes to the tree at 8
    assert (sched.slot_at([1, 2, 3, 4]), sched.slot_at(list(range(1, 9)))) == (2, 1)
    b, r = admitted(sched, [*range(1, 7), 30, 31])
    assert (r.device_prefix_len, r.full_kv_hit_length, r.mamba_branching_seqlen) == (4, 6, 6)
    assert r.last_device_node.num_tokens == 4 and b.mamba_pool_idx == 3
    assert sched.temporal(3) == state_of([1, 2, 3, 4])
    sched.check()
    sched.chunk(b, r.mamba_branching_seqlen)  # first chunk ends where the branch starts
    assert sched.slot_at(list(range(1, 7))) == 4
    c, r = admitted(sched, [*range(1, 7), 40])
    assert (r.device_prefix_len, r.mamba_branching_seqlen, c.mamba_pool_idx) == (6, None, 5)
    sched.check()
    sched.finish(b, is_insert=False)
    sched.finish(c)
    sched.check()
    assert sched.cache.evictable_size(ComponentType.MAMBA) == 3  # at 4, 6 and 8


def test_chunked_prefill_checkpoints_through_ping_pong() -> None:
    sched = Sched(make(page_size=4, mamba_cache_chunk_size=4))
    tokens = list(range(1, 17))
    req, _ = admitted(sched, tokens)
    # Admission takes the working slot only; a tracking slot is taken when a track is written.
    assert (req.mamba_pool_idx, req.mamba_ping_pong) == (1, [None, None])
    assert sched.pool.allocator.available_size() == 15
    sched.chunk(req, 6)  # tracks 4 in entry 0 (slot 2), which the tree takes
    assert (req.mamba_ping_pong, req.cache_protected_len, sched.slot_at(tokens[:4])) == (
        [None, None],
        4,
        2,
    )
    sched.chunk(req, 12)  # tracks 12 in entry 1 (slot 3)
    assert (req.mamba_ping_pong, req.cache_protected_len, sched.slot_at(tokens[:12])) == (
        [None, None],
        12,
        3,
    )
    assert sched.pool.held_slots(req) == [1]  # between chunks: the working slot only
    sched.chunk(req, 14)  # no grid position in (12, 14]: nothing new to publish
    assert (req.cache_protected_len, req.kv_committed_len) == (12, 14)
    sched.check()
    sched.forward(req, 16)  # decode crosses 16: tracked in entry 0 (slot 4)
    assert req.mamba_ping_pong == [4, None]
    sched.finish(req)  # slot 4 is donated, slot 1 freed
    assert sched.slot_at(tokens) == 4
    assert sched.pool.allocator.available_size() == 13  # the tree holds 2, 3 and 4
    sched.check()


def test_decode_holds_one_tracking_slot_between_steps() -> None:
    sched = Sched(make(page_size=4, mamba_cache_chunk_size=4))
    req, _ = admitted(sched, list(range(1, 30)))
    sched.forward(req, 2)  # no grid position crossed: no tracking slot
    assert sched.pool.held_slots(req) == [1]
    for end in (4, 8, 12, 13):
        sched.forward(req, end)
        assert len(sched.pool.held_slots(req)) == 2, end  # working + the last track
        assert req.mamba_last_track_seqlen == min(end // 4 * 4, 12)
    sched.finish(req)
    assert sched.slot_at(list(range(1, 13))) is not None
    sched.check()


def test_unaligned_finish_publishes_only_the_tracked_prefix() -> None:
    sched = Sched(make(page_size=4, mamba_cache_chunk_size=8))
    req, _ = admitted(sched, list(range(1, 15)))
    sched.forward(req, 14)  # tracks 8; positions 8..13 have KV but no checkpoint
    free_before = sched.cache.pools.kv_allocator.available_size()
    sched.finish(req)
    assert sched.cache.total_size() == 8
    assert sched.cache.pools.kv_allocator.available_size() == free_before + 8
    sched.check()


def test_matched_request_never_admitted_releases_its_slots() -> None:
    for page_size in (1, 4):  # the working slot only, with or without the extra buffer
        cache = make(page_size=page_size)
        req = Req(list(range(1, 9)))
        cache.match_prefix(MatchPrefixParams(cache.make_key(req.token_ids), req=req))
        assert cache.pools.available()["mamba"] == 15
        cache.release_req_slots(req)
        cache.release_req_slots(req)
        assert req.mamba_pool_idx is None and req.mamba_ping_pong is None
        assert cache.pools.available() == cache.pools.capacities()
        cache.check_invariants({"full": 0, "mamba": 0, "req": 0})


def test_cow_evicts_lru_states_but_never_its_source() -> None:
    sched = Sched(make(mamba_slots=3))
    for tokens in ([1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]):
        req, _ = admitted(sched, tokens)
        sched.forward(req, 4)
        sched.finish(req)
    assert sched.pool.allocator.available_size() == 0
    d, r = admitted(sched, [1, 2, 3, 4, 13])
    # the pool was full: the LRU state ([5..8], a leaf) went whole, the matched one stayed
    assert (r.device_prefix_len, d.mamba_pool_idx, sched.slot_at([1, 2, 3, 4])) == (4, 2, 1)
    probe = sched.cache.match_prefix(MatchPrefixParams(sched.cache.make_key([5, 6, 7, 8])))
    assert probe.full_kv_hit_length == 0
    e, _ = admitted(sched, [1, 2, 3, 4, 14])
    assert e.mamba_pool_idx == 3  # [9..12] went; [1..4] is locked by d and e
    assert sched.admit([20, 21]) is None  # nothing evictable: not admitted, nothing held
    sched.check()
    for req in list(sched.running):
        sched.finish(req)
    sched.check()


def test_finished_request_frees_a_state_the_tree_already_has() -> None:
    sched = Sched(make())
    for _ in range(2):
        req, _ = admitted(sched, [1, 2, 3])
        sched.forward(req, 3)
        sched.finish(req)
        sched.check()
    # the second request matched everything: nothing new, its working slot is freed
    assert sched.cache.evictable_size(ComponentType.MAMBA) == 1
    assert sched.pool.allocator.available_size() == 15


# ---------------------------------------------------------------------- properties
PREFIXES = [[], [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 10, 11, 12], [20, 21, 22, 23]]

ops = st.lists(
    st.tuples(
        st.sampled_from(
            ["admit", "admit", "chunk", "chunk", "chunk", "finish", "abandon", "evict"]
        ),
        st.integers(0, 3),
        st.lists(st.integers(1, 40), min_size=1, max_size=10),
        st.integers(0, 12),
    ),
    min_size=12,
    max_size=40,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=ops,
    shape=st.sampled_from([(1, 1, None), (1, 2, 2), (2, 2, None), (4, 4, 2)]),
    mamba_slots=st.sampled_from([4, 8, 24]),
)
def test_random_scheduler_runs_keep_every_pool_exact(
    ops: list[tuple[str, int, list[int], int]],
    shape: tuple[int, int, int | None],
    mamba_slots: int,
) -> None:
    page_size, chunk_size, cap = shape
    cache = make(
        page_size,
        mamba_slots,
        full_tokens=96,
        mamba_cache_chunk_size=chunk_size,
        mamba_max_states_per_path=cap,
    )
    sched = Sched(cache)
    branch_at: dict[int, int] = {}
    for op, pick, suffix, num in ops:
        if op == "admit" and len(sched.running) < 4:
            got = sched.admit(PREFIXES[pick] + suffix)
            if got is not None and got[1].mamba_branching_seqlen is not None:
                branch_at[id(got[0])] = got[1].mamba_branching_seqlen
        elif op == "abandon":
            req = Req(PREFIXES[pick] + suffix)
            cache.match_prefix(MatchPrefixParams(cache.make_key(req.token_ids), req=req))
            sched.check(matched=(req,))
            cache.release_req_slots(req)
        elif op == "evict":
            cache.evict(EvictParams(num_tokens=num, mamba_num=num % 3))
        elif sched.running:
            req = sched.running[pick % len(sched.running)]
            left = len(req.token_ids) - req.kv_committed_len
            if op == "finish" or left == 0:
                # A finished request's id may be reused by the next one admitted.
                branch_at.pop(id(req), None)
                sched.finish(req, is_insert=num != 0)
            else:
                end = min(req.kv_committed_len + 1 + num, len(req.token_ids))
                end = min(end, branch_at.pop(id(req), end))
                sched.chunk(req, end)
        sched.check()
    for req in list(sched.running):
        sched.finish(req)
    sched.check()
    cache.evict(EvictParams(num_tokens=10**6, mamba_num=10**6))
    assert cache.pools.available() == cache.pools.capacities()
    assert not cache.tree.root.children
    cache.check_invariants({"full": 0, "mamba": 0, "req": 0})
