"""SGLang's HiCache on FULL+Mamba and FULL+SWA+Mamba caches (Mamba host states, with SWA host
windows), on the uniradix core and on SGLang's Python core: SGLang's own `UnifiedRadixCache`
and `HybridCacheController` (CPU copies, see `sglang_hicache`) play the same stream on both
(`sglang_mamba_hicache`), compared call by call, with the KV and the Mamba states the matches
find on the device (load-backs included) checked against what the requests wrote, the same
final tree on both tiers of both components, and every pool whole again once everything is
evicted."""

from __future__ import annotations

from array import array
from collections import defaultdict
from types import SimpleNamespace
from unittest import mock

import pytest

from tests.integrations.sglang_env import load_sglang

load_sglang(kits=True)

from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType  # noqa: E402
from sglang.test.kits.unified_radix_cache.config import CONFIGS  # noqa: E402

from tests.integrations.sglang_hicache import (  # noqa: E402
    assert_same_events_on_both_cores,
    insert_and_evict_with_host_full,
    load_back,
    run_hicache,
    scripted_in_lock_step,
)
from tests.integrations.sglang_hybrid_stream import Pools  # noqa: E402
from tests.integrations.sglang_mamba_hicache import (  # noqa: E402
    ALL,
    drain,
    host_sizes,
    mamba_tree_state,
    play_mamba_hicache,
)

FULL, SWA, MAMBA = ComponentType.FULL, ComponentType.SWA, ComponentType.MAMBA
MAMBA_CONFIGS = [c for c in CONFIGS if c.components == (FULL, MAMBA)]
SWA_MAMBA_CONFIGS = [c for c in CONFIGS if c.components == (FULL, SWA, MAMBA)]
PS4 = MAMBA_CONFIGS[1]


def run(cfg, core: str, write_policy: str, n: int, seed: int, **kwargs):
    def play(cache, allocator):
        whole = Pools(cache).left(), host_sizes(cache)
        core = cache.tree_core
        finish = core.finish_mamba_state_eviction  # write-back: states backed up first
        with mock.patch.object(core, "finish_mamba_state_eviction", wraps=finish) as held:
            trace = play_mamba_hicache(cache, cfg, n, seed)
        return [*trace, ("held back", held.call_count), ("whole", whole), ("drained", drain(cache))]

    return run_hicache(cfg, core, write_policy, play, mamba_tree_state, **kwargs)


@pytest.mark.parametrize(
    "cfg, write_policy, seed",
    [(c, policy, 7) for c in MAMBA_CONFIGS for policy in ("write_through", "write_back")]
    + [(MAMBA_CONFIGS[1], "write_through_selective", 3)]  # a seed with a request load-back
    + [(c, policy, 7) for c in SWA_MAMBA_CONFIGS for policy in ("write_through", "write_back")],
    ids=lambda v: getattr(v, "label", v),
)
def test_mamba_hicache_plays_the_same_on_both_cores(cfg, write_policy, seed):
    expected, _, _, python_core = run(cfg, "python", write_policy, 150, seed)
    trace, _, _, uniradix_core = run(cfg, "uniradix", write_policy, 150, seed)
    assert (python_core, uniradix_core) == ("UnifiedTreeCoreInspector", "UniradixInspector")
    played = [s for s in expected if isinstance(s[0], tuple)]  # the requests served
    assert any(s[1] for s in played), "no load-back"
    own = [s[2] for s in played if s[2] is not None]
    assert own and all(own), "a request's own slot did not get the loaded state"
    assert any(s[0][2] for s in played), "no match ending at a state on the host only"
    assert all(s[3] for s in played), "a prefix's KV is not what its requests wrote"
    assert all(s[4] for s in played), "a matched Mamba state is not what its request wrote"
    assert any(s[7][0] for s in played), "no device eviction"
    assert sum(s[3] for s in expected if s[0] == "evict") > 0, "no Mamba tombstone"
    host = [s[2] for s in expected if s[0] == "evict host"]
    assert sum(freed[1] for freed in host) > 0, "no Mamba host eviction"
    held, whole, drained = (s[1] for s in expected[-3:])
    assert (held > 0) == (write_policy == "write_back"), "inner states not backed up first"
    assert drained == whole, "a pool is not whole once everything is evicted"
    assert trace == expected


@pytest.mark.parametrize("cfg", MAMBA_CONFIGS[:2], ids=lambda c: c.label)
def test_mamba_hicache_tree_is_the_same_on_both_cores(cfg):
    """The tree before the final drain: which tiers hold each node's KV and state, locks."""

    def play(cache, allocator):
        return play_mamba_hicache(cache, cfg, 80, 5)

    runs = [run_hicache(cfg, core, "write_through", play, mamba_tree_state)
            for core in ("python", "uniradix")]  # fmt: skip
    expected = runs[0].tree
    assert any(not r[1] and r[2] for r in expected), "no host-only node"
    assert any(not r[5] and r[6] for r in expected), "no state on the host only"
    assert runs[1].tree == expected


@pytest.mark.parametrize("cfg", MAMBA_CONFIGS[:2], ids=lambda c: c.label)
def test_mamba_hicache_kv_events_are_the_same_on_both_cores(cfg):
    """Device and host stores and removals (`medium` GPU / CPU), in the same order."""
    assert_same_events_on_both_cores(run, cfg, 80, 3)


def mamba_script(cache, allocator) -> list:
    """Host-tier calls the stream reaches only by chance, in one sequence: every step's
    result and the tree after it, free of node ids."""
    ps, states = PS4.page_size, cache.req_to_token_pool.mamba_allocator
    core = cache.tree_core
    out = []

    def step(name, result):
        out.append((name, result, mamba_tree_state(cache)))

    def insert(tokens):
        key = RadixKey(array("q", tokens))
        state = states.alloc(1)
        value = allocator.alloc(len(tokens))
        r = cache.insert(InsertParams(key=key, value=value, mamba_value=state))
        if r.mamba_exist:
            states.free(state)
        return r.prefix_len, r.mamba_exist

    def match(tokens):
        m = cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens))))
        figures = (m.device_prefix_len, m.host_hit_length, m.mamba_host_hit_length)
        return m.best_match_node, figures

    a, b, c = (list(range(s, s + 3 * ps)) for s in (100, 300, 500))
    for tokens in (a, b, c, a, b, c):  # twice: a second hit backs up under the selective policy
        step("insert", insert(tokens))
    cache.check_hicache_events()  # the backups acked: every node and state on the host
    step("insert a state inside a", insert(a[: 2 * ps]))  # a backed-up node: backed up again
    cache.check_hicache_events()
    step("compatible", core.is_write_through_compatible())
    evicted = cache.evict(EvictParams(num_tokens=ALL, mamba_num=ALL))
    step("evict all", (evicted.num_tokens_evicted, evicted.mamba_num_evicted))
    node_a, figures = match(a)
    step("match a", (figures, core.component_has_host_value_only(node_a, MAMBA)))
    # Pinned and released in turn: a's state is then the least recent host-only one.
    for tokens in (a, b, c, a[: 2 * ps]):
        node = match(tokens)[0]
        cache.dec_host_lock_ref(node, cache.inc_host_lock_ref(node).to_dec_params())
    step("evict one state", cache.evict_host(1, MAMBA))
    node_b, _ = match(b)
    receipt = cache.inc_host_lock_ref(node_b)
    step("evict states, b pinned", cache.evict_host(ALL, MAMBA))
    cache.dec_host_lock_ref(node_b, receipt.to_dec_params())
    node_b, figures = match(b)
    req = SimpleNamespace(kv=SimpleNamespace(holds_mamba=False, mamba_pool_idx=None))
    loaded = load_back(cache, node_b, req)
    if req.kv.mamba_pool_idx is not None:
        states.free(req.kv.mamba_pool_idx.unsqueeze(0))
    step("load back b", (figures, loaded, match(b)[1]))
    node_b, _ = match(b)
    tracker = defaultdict(int)
    if cache.is_backuped(node_b) and not core.is_full_device_evicted(node_b):
        cache._demote(node_b, tracker)  # the controller's demote of a backed-up node
    step("demote b", dict(tracker))
    step("evict host", (cache.evict_host(ALL, MAMBA), cache.evict_host(ALL)))
    d = list(range(700, 700 + 2 * ps))
    evict = EvictParams(num_tokens=ALL, mamba_num=ALL)
    insert_and_evict_with_host_full(cache, step, lambda: insert(d), evict)
    return out


@pytest.mark.parametrize("write_policy", ["write_through", "write_through_selective", "write_back"])
def test_mamba_host_methods_in_lock_step(write_policy):
    trace = scripted_in_lock_step(PS4, write_policy, mamba_script, mamba_tree_state)
    steps = dict((name, result) for name, result, _ in trace)
    trees = dict((name, tree) for name, _, tree in trace)
    assert steps["compatible"] is True
    assert steps["evict all"][1] > 0
    assert steps["match a"] == ((0, 3 * PS4.page_size, 1), True)
    assert steps["evict one state"] == 1
    rows = {row[0]: row for row in trees["evict one state"]}
    a_ = tuple(range(100, 100 + 3 * PS4.page_size))
    assert a_ not in rows and rows[a_[: 2 * PS4.page_size]][6], "a was not the least recent"
    assert steps["evict states, b pinned"] > 0
    assert any(row[0][0] == 300 and row[6] for row in trees["evict states, b pinned"])
    assert steps["load back b"][1] and steps["load back b"][2][2] == 0
    assert steps["demote b"].get(MAMBA) == 1
    _, states, drops = steps["evict all, host full"]
    assert states > 0 and (drops > 0) == (write_policy == "write_back")
