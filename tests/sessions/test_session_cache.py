"""Session coverage scenarios with exact nodes: what each component covers, how a later turn
moves it, the eviction order with and without sessions, release, the closed-session memory,
and covered data still evicted (and counted) when nothing else is left."""

from __future__ import annotations

import pytest

from tests.driver import MiniScheduler
from uniradix import CacheConfig, EvictParams, InsertParams, MatchPrefixParams, RadixKey
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.factory import build_cache
from uniradix.sessions import SessionCache
from uniradix.tree.node import TreeNode
from uniradix.types import ComponentType


def make(sessions: bool = True, full: int = 64, **kw: object) -> UnifiedRadixCache:
    config = CacheConfig.of(
        full_tokens=full,
        max_context_len=128,
        max_running_requests=8,
        enable_session_cache=sessions,
        **kw,  # type: ignore[arg-type]
    )
    return build_cache(config)


def hybrid(**kw: object) -> UnifiedRadixCache:
    return make(sliding_window=4, swa_tokens=64, mamba_slots=16, **kw)


def put(cache: UnifiedRadixCache, tokens: list[int], state: bool = False) -> TreeNode:
    value = cache.pools.kv_allocator.alloc(len(tokens))
    assert value is not None
    mamba = None
    if state:
        assert cache.pools.mamba is not None
        mamba = cache.pools.mamba.allocator.alloc(1)
    prefix = cache.match_prefix(MatchPrefixParams(RadixKey(tokens)))
    n = prefix.device_prefix_len
    if n:  # the tree's own slots for the shared part, as a scheduler would write them
        cache.pools.kv_allocator.free(value[:n])
        value[:n] = prefix.device_indices
    result = cache.insert(
        InsertParams(RadixKey(tokens), value, prev_prefix_len=n, mamba_value=mamba)
    )
    return result.last_device_node


def sessions(cache: UnifiedRadixCache) -> SessionCache:
    assert isinstance(cache.sessions, SessionCache)
    return cache.sessions


def covered(cache: UnifiedRadixCache, ct: ComponentType) -> list[int]:
    """Prefix lengths of the nodes covered for `ct`, root side first."""
    s, i = sessions(cache), cache.component(ct).index
    nodes = sorted(cache.tree.nodes(), key=cache.tree.prefix_len)
    return [cache.tree.prefix_len(n) for n in nodes if s.is_covered(n, i)]


def test_coverage_per_component_full_path_swa_window_plus_page_mamba_leaf() -> None:
    cache = hybrid()
    for end in (4, 8, 10, 12, 14):  # a chain of nodes ending at these prefix lengths
        leaf = put(cache, list(range(end)), state=True)
    sessions(cache).register("chat", leaf)
    assert covered(cache, ComponentType.FULL) == [4, 8, 10, 12, 14]
    # window 4 + one page (1): the leaf (2 units), then 12's node (2): 4 < 5, then 10's: 6
    assert covered(cache, ComponentType.SWA) == [10, 12, 14]
    assert covered(cache, ComponentType.MAMBA) == [14]
    cache.check_invariants()


def test_a_later_turn_moves_the_coverage_forward_and_a_retry_moves_it_back() -> None:
    cache = hybrid()
    first = put(cache, list(range(8)), state=True)
    sessions(cache).register("chat", first)
    second = put(cache, list(range(16)), state=True)
    sessions(cache).register("chat", second)
    # SWA keeps live KV as one window per leaf, so each 8-token insert made two nodes
    assert covered(cache, ComponentType.FULL) == [4, 8, 12, 16]
    assert covered(cache, ComponentType.MAMBA) == [16]
    assert covered(cache, ComponentType.SWA) == [12, 16]
    sessions(cache).register("chat", first)  # a retry of the first turn's context
    assert covered(cache, ComponentType.FULL) == [4, 8]
    assert covered(cache, ComponentType.MAMBA) == [8]
    cache.check_invariants()


def test_a_split_covered_node_keeps_both_halves_covered_where_they_hold_data() -> None:
    cache = hybrid()
    leaf = put(cache, list(range(12)), state=True)
    sessions(cache).register("chat", leaf)
    # nodes [0, 8) and [8, 12) (the SWA leaf cap); both covered by Full and SWA
    put(cache, [*range(6), 99, 98])  # splits [0, 8) at 6
    assert covered(cache, ComponentType.FULL) == [6, 8, 12]
    assert covered(cache, ComponentType.SWA) == [6, 8, 12]  # the parent took SWA KV
    assert covered(cache, ComponentType.MAMBA) == [12]  # no state for the shorter prefix
    sessions(cache).release_session("chat")
    assert covered(cache, ComponentType.FULL) == []
    cache.check_invariants()


def _three_leaves(cache: UnifiedRadixCache) -> list[TreeNode]:
    """Three 8-token prompts with nothing shared, oldest first."""
    return [put(cache, [base + j for j in range(8)]) for base in (100, 200, 300)]


@pytest.mark.parametrize("with_sessions", [False, True])
def test_eviction_order_with_and_without_a_covered_leaf(with_sessions: bool) -> None:
    cache = make(with_sessions)
    oldest, middle, _ = _three_leaves(cache)
    if with_sessions:
        cache.open_session("agent")
        sessions(cache).register("agent", oldest)
    cache.evict(EvictParams(num_tokens=8))
    survivors = {n.key[:8] for n in cache.tree.root.children.values()}
    gone = oldest if not with_sessions else middle
    assert gone.parent is None
    assert gone.key[:8] not in survivors and len(survivors) == 2
    cache.check_invariants()


def test_swa_and_mamba_lists_evict_covered_nodes_last() -> None:
    cache = hybrid()
    a = put(cache, list(range(8)), state=True)
    b = put(cache, [50 + j for j in range(8)], state=True)
    put(cache, [*range(8), 70, 71, 72, 73], state=True)  # a is now internal
    sessions(cache).register("chat", a)
    swa, mamba = cache.component(ComponentType.SWA), cache.component(ComponentType.MAMBA)
    cache.evict(EvictParams(mamba_num=1))
    # b is least recent and uncovered (a leaf: it goes whole); a's state survives
    assert b.parent is None and mamba.has_value(a)
    cache.evict(EvictParams(swa_num_tokens=4))  # the newest leaf goes before covered a
    assert swa.has_value(a) and mamba.has_value(a)
    assert sessions(cache).evicted_while_covered == 0
    cache.check_invariants()


def test_covered_data_is_evicted_and_counted_when_nothing_else_is_left() -> None:
    cache = make(full=24)
    old, mid, new = _three_leaves(cache)
    for sid, leaf in (("a", old), ("b", mid)):
        sessions(cache).register(sid, leaf)
    result = cache.evict(EvictParams(num_tokens=16))
    assert result.num_tokens_evicted == 16
    assert new.parent is None and old.parent is None and mid.parent is not None
    assert sessions(cache).evicted_while_covered == 1
    cache.check_invariants()
    assert sessions(cache).release_session("a").covered_nodes == 0  # its node is gone


def test_release_makes_nodes_ordinary_and_frees_nothing() -> None:
    cache = make()
    oldest, _, _ = _three_leaves(cache)
    cache.open_session("agent")
    sessions(cache).register("agent", oldest)
    free = cache.pools.kv_allocator.available_size()
    released = cache.release_session("agent")
    assert (released.covered_nodes, released.covered_tokens) == (1, 8)
    assert cache.pools.kv_allocator.available_size() == free
    assert cache.release_session("agent").covered_nodes == 0  # idempotent
    cache.evict(EvictParams(num_tokens=8))
    assert oldest.parent is None  # plain LRU again
    cache.check_invariants()


def test_closed_session_memory_is_bounded() -> None:
    cache = make(full=128)
    s = sessions(cache)
    s.closed_memory = 2
    leaves = _three_leaves(cache)
    for sid in ("a", "b", "c"):
        cache.open_session(sid)
        cache.release_session(sid)
    assert not s.is_closed("a") and s.is_closed("b") and s.is_closed("c")
    s.register("c", leaves[0])  # a late turn of a closed session covers nothing
    assert s.ignored_late_turns == 1 and not s.is_covered(leaves[0])
    s.register("a", leaves[1])  # forgotten: treated as a new session
    assert s.is_covered(leaves[1]) and s.stats().opened == 4
    cache.open_session("c")  # reopening clears the closed mark
    s.register("c", leaves[2])
    assert s.is_covered(leaves[2])
    cache.check_invariants()


def test_finished_request_with_a_session_id_registers_its_leaf() -> None:
    cache = make()
    sched = MiniScheduler(cache)
    req = sched.admit(list(range(10)))
    assert req is not None
    req.session_id = "chat"
    assert sched.chunk(req, 9)
    sched.finish(req)
    leaf = cache.match_prefix(MatchPrefixParams(RadixKey(list(range(9))))).last_device_node
    assert sessions(cache).is_covered(leaf)
    cache.check_invariants({"full": 0})


def test_sessions_off_is_a_null_object() -> None:
    cache = make(sessions=False)
    with pytest.raises(ValueError, match="session cache is off"):
        cache.open_session("a")
    assert cache.release_session("a").covered_nodes == 0
    assert cache.tree.leaves.policy is not None and not cache.sessions.enabled


def test_bad_session_id_is_rejected() -> None:
    with pytest.raises(TypeError, match="session_id"):
        make().open_session("")
