"""Full+SWA caches driven like a scheduler: random request sequences (property tests, with
`check_invariants()` after every step) and a multi-turn chat workload with a small SWA pool."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from uniradix import CacheConfig, EvictParams, MatchPrefixParams, Req, build_cache
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.memory.swa_allocator import SWASlotAllocator


class MiniScheduler:
    """Admission, chunked prefill, decode and finish through the cache's public API only."""

    def __init__(self, cache: UnifiedRadixCache) -> None:
        allocator = cache.pools.kv_allocator
        assert isinstance(allocator, SWASlotAllocator)
        self.cache, self.allocator, self.ps = cache, allocator, cache.page_size
        self.running: list[Req] = []
        self.prompt_tokens = self.hit_tokens = 0

    def held(self) -> dict[str, int]:
        """Slots running requests own privately, per pool (SWA: minus the out-of-window)."""
        full = sum(r.kv_allocated_len - r.cache_protected_len for r in self.running)
        swa = sum(
            r.kv_allocated_len - max(r.cache_protected_len, r.swa_evicted_seqlen)
            for r in self.running
        )
        return {"full": full, "swa": swa}

    def check(self) -> None:
        self.cache.check_invariants(self.held())

    def _make_room(self, num: int) -> bool:
        a = self.allocator
        if (short := num - a.full_available_size()) > 0:
            self.cache.evict(EvictParams(num_tokens=short))
        if (short := num - a.swa_available_size()) > 0:
            self.cache.evict(EvictParams(swa_num_tokens=short))
        return a.available_size() >= num

    def _grow(self, req: Req, committed: int) -> bool:
        """Marks positions `[0, committed)` computed, allocating whole pages as needed."""
        assert req.req_pool_idx is not None
        need = -(-committed // self.ps) * self.ps - req.kv_allocated_len
        if need > 0:
            if not self._make_room(need):
                return False
            slots = self.allocator.alloc(need)
            assert slots is not None
            self.cache.pools.req_to_token_pool.write(req.req_pool_idx, req.kv_allocated_len, slots)
            req.kv_allocated_len += need
        req.kv_committed_len = committed
        return True

    def admit(self, tokens: list[int]) -> Req | None:
        row = self.cache.pools.req_to_token_pool.alloc()
        if row is None:
            return None
        m = self.cache.match_prefix(MatchPrefixParams(self.cache.make_key(tokens)))
        req = Req(token_ids=list(tokens), req_pool_idx=row)
        self.cache.pools.req_to_token_pool.write(row, 0, m.device_indices)
        req.lock = self.cache.inc_lock_ref(m.last_device_node)
        req.last_node = m.last_device_node
        req.cache_protected_len = req.kv_allocated_len = req.kv_committed_len = m.device_prefix_len
        self.prompt_tokens += len(tokens)
        self.hit_tokens += m.device_prefix_len
        self.running.append(req)
        return req

    def prefill(self, req: Req, chunk: int) -> bool:
        """Computes the next `chunk` prompt tokens and caches them (chunked prefill)."""
        end = min(len(req.token_ids), req.kv_committed_len + chunk)
        if end <= req.kv_committed_len or not self._grow(req, end):
            return False
        self.cache.cache_unfinished_req(req, chunked=True)
        self.cache.free_out_of_window_slots(req)
        return True

    def decode(self, req: Req, token: int) -> bool:
        if req.kv_committed_len < len(req.token_ids):
            return False
        if not self._grow(req, req.kv_committed_len + 1):
            return False
        req.token_ids.append(token)
        self.cache.free_out_of_window_slots(req)
        self.cache.release_window_lock(req)
        return True

    def finish(self, req: Req, is_insert: bool = True) -> None:
        self.running.remove(req)
        self.cache.cache_finished_req(req, is_insert)


# ---------------------------------------------------------------------- property tests
PREFIXES = [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9, 9, 9], [7, 7, 7, 7, 7, 7]]

step = st.tuples(st.just("step"), st.integers(0, 7), st.integers(1, 8))
op = st.one_of(
    st.tuples(
        st.just("admit"),
        st.integers(0, len(PREFIXES) - 1),
        st.lists(st.integers(0, 3), max_size=10),
    ),
    step,
    step,
    step,
    st.tuples(st.just("finish"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("evict"), st.integers(0, 12), st.integers(0, 12)),
)


@settings(max_examples=60, deadline=None)
@given(
    ps=st.sampled_from([1, 2]),
    window=st.sampled_from([1, 3, 4, 6]),
    ops=st.lists(op, min_size=20, max_size=80),
)
def test_random_requests_keep_invariants_and_return_every_slot(
    ps: int, window: int, ops: list[tuple[object, ...]]
) -> None:
    """A step prefills up to `n` prompt tokens of a request, or decodes `n` tokens once its
    prompt is done (freeing out-of-window slots and releasing its window lock early)."""
    cache = build_cache(
        CacheConfig.of(
            full_tokens=80,
            swa_tokens=24,
            sliding_window=window,
            page_size=ps,
            max_running_requests=4,
            max_context_len=160,
        )
    )
    s = MiniScheduler(cache)
    for name, a, b in ops:
        reqs = s.running
        if name == "admit":
            assert isinstance(a, int) and isinstance(b, list)
            s.admit(PREFIXES[a] + b)
        elif name == "evict":
            assert isinstance(a, int) and isinstance(b, int)
            cache.evict(EvictParams(num_tokens=a, swa_num_tokens=b))
        elif reqs:
            assert isinstance(a, int) and isinstance(b, int)
            req = reqs[a % len(reqs)]
            if name == "finish":
                s.finish(req, bool(b))
            elif req.kv_committed_len < len(req.token_ids):
                s.prefill(req, b)
            else:
                for token in range(min(b, 120 - req.kv_committed_len)):
                    s.decode(req, token % 4)
        s.check()
    for req in list(s.running):
        s.finish(req)
        s.check()
    cache.evict(EvictParams(num_tokens=10**9))
    s.check()
    a = s.allocator
    assert (a.full_available_size(), a.swa_available_size()) == (a.capacity, a.swa_capacity)
    assert not cache.tree.root.children


# ---------------------------------------------------------------------- multi-turn workload
@dataclass
class Conversation:
    context: list[int]
    turns_left: int
    pending: Req | None = None
    answer_len: int = 0
    answer: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class WorkloadStats:
    hit_rate: float
    requests: int
    max_swa_used: int
    swa_capacity: int


def run_multi_turn(
    swa_tokens: int,
    full_tokens: int = 4096,
    window: int = 32,
    page_size: int = 1,
    seed: int = 0,
) -> WorkloadStats:
    """12 chats over 2 system prompts, 4 turns each, up to 4 running at once; prompts are
    the whole conversation so far, prefilled in chunks of 64, answers decoded token by
    token. Invariants are checked every 8 steps and at the end."""
    rng = random.Random(seed)
    cache = build_cache(
        CacheConfig.of(
            full_tokens=full_tokens,
            swa_tokens=swa_tokens,
            sliding_window=window,
            page_size=page_size,
            max_running_requests=4,
            max_context_len=1024,
        )
    )
    s = MiniScheduler(cache)
    systems = [[rng.randrange(1000, 30000) for _ in range(128)] for _ in range(2)]
    chats = [Conversation(list(systems[i % 2]), turns_left=4) for i in range(12)]
    requests = steps = max_swa_used = 0
    while any(c.turns_left or c.pending for c in chats):
        for c in chats:
            if c.pending is None and c.turns_left and len(s.running) < 4:
                c.context += [rng.randrange(1000, 30000) for _ in range(rng.randint(20, 60))]
                c.pending = s.admit(c.context)
                c.answer_len, c.answer = rng.randint(10, 40), []
                c.turns_left -= 1
                requests += 1
        for c in chats:
            req = c.pending
            if req is None:
                continue
            if req.kv_committed_len < len(c.context):
                s.prefill(req, 64)
            elif len(c.answer) < c.answer_len:
                token = rng.randrange(1000, 30000)
                if s.decode(req, token):
                    c.answer.append(token)
            else:
                s.finish(req)
                c.context += c.answer
                c.pending = None
        steps += 1
        max_swa_used = max(max_swa_used, s.allocator.swa_used_size())
        assert steps < 20000, "the workload stalled"
        if steps % 8 == 0:
            s.check()
    s.check()
    cache.evict(EvictParams(num_tokens=10**9))
    a = s.allocator
    assert (a.full_available_size(), a.swa_available_size()) == (a.capacity, a.swa_capacity)
    return WorkloadStats(s.hit_tokens / s.prompt_tokens, requests, max_swa_used, a.swa_capacity)


def test_multi_turn_with_a_quarter_size_swa_pool_still_hits() -> None:
    small = run_multi_turn(swa_tokens=1024)
    same = run_multi_turn(swa_tokens=4096)
    print(f"\nmulti-turn hit rate: SWA pool 1/4 of full {small}, SWA pool = full {same}")
    assert small.requests == same.requests == 48
    assert small.hit_rate > 0
    assert small.max_swa_used <= small.swa_capacity
