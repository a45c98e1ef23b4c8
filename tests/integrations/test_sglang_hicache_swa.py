"""SGLang's HiCache on FULL+SWA caches (SWA host windows), on the uniradix core and on SGLang's
Python core: SGLang's own `UnifiedRadixCache` and `HybridCacheController` (CPU copies, see
`sglang_hicache`) play the same stream on both (`sglang_swa_hicache`), compared call by call,
with the KV that load-backs bring back, full and SWA, checked against what the requests
wrote, and the same final tree on both tiers of both components."""

from __future__ import annotations

from unittest import mock

import pytest

from tests.integrations.sglang_env import load_sglang

load_sglang(kits=True)

from sglang.srt.mem_cache.unified_cache.component_type import ComponentType  # noqa: E402
from sglang.test.kits.unified_radix_cache.config import CONFIGS  # noqa: E402

from tests.integrations.sglang_hicache import assert_same_events_on_both_cores, run_hicache  # noqa: E402
from tests.integrations.sglang_swa_hicache import (  # noqa: E402
    play_swa_hicache,
    swa_tree_state,
)

FULL, SWA = ComponentType.FULL, ComponentType.SWA
SWA_CONFIGS = [c for c in CONFIGS if c.components == (FULL, SWA)]


def run(cfg, core: str, write_policy: str, n: int, seed: int, **kwargs):
    def play(cache, allocator):
        return play_swa_hicache(cache, cfg, n, seed)

    return run_hicache(cfg, core, write_policy, play, swa_tree_state, **kwargs)


@pytest.mark.parametrize(
    "cfg, write_policy",
    [(c, "write_through") for c in SWA_CONFIGS]
    + [(c, "write_through_selective") for c in SWA_CONFIGS[1:4:2]],
    ids=lambda v: getattr(v, "label", v),
)
def test_swa_hicache_plays_the_same_on_both_cores(cfg, write_policy):
    expected, expected_tree, _, python_core = run(cfg, "python", write_policy, 120, seed=7)
    trace, tree, _, uniradix_core = run(cfg, "uniradix", write_policy, 120, seed=7)
    assert (python_core, uniradix_core) == ("UnifiedTreeCoreInspector", "UniradixInspector")
    played = [s for s in expected if s[0] not in ("skip", "evict", "evict host")]
    assert any(s[1] for s in played), "no load-back"
    assert all(s[2] for s in played), "a prefix's KV is not what its requests wrote"
    assert any(any(s[5]) for s in played), "no device eviction"
    assert sum(s[2] for s in expected if s[0] == "evict") > 0, "no SWA tombstone"
    assert sum(s[1] for s in expected if s[0] == "evict host") > 0, "no SWA host eviction"
    assert any(not r[1] and r[2] for r in expected_tree), "no host-only node"
    if write_policy == "write_through":
        assert any(not r[5] and r[6] for r in expected_tree), "no host-only SWA window"
    assert trace == expected
    assert tree == expected_tree


@pytest.mark.parametrize("cfg", SWA_CONFIGS[:2], ids=lambda c: c.label)
@pytest.mark.parametrize("write_policy", ["write_through", "write_back"])
def test_swa_hicache_kv_events_are_the_same_on_both_cores(cfg, write_policy):
    """Device and host stores and removals (`medium` GPU / CPU), in the same order."""
    assert_same_events_on_both_cores(run, cfg, 80, 3, write_policy)


def run_counting_held_back(cfg, core: str, n: int, seed: int):
    """The write-back stream, with how often the SWA walk held a window back for a backup."""

    def play(cache, allocator):
        tree_core = cache.tree_core
        finish = tree_core.finish_swa_state_eviction
        with mock.patch.object(tree_core, "finish_swa_state_eviction", wraps=finish) as held:
            trace = play_swa_hicache(cache, cfg, n, seed)
        return [*trace, ("held back", held.call_count)]

    return run_hicache(cfg, core, "write_back", play, swa_tree_state)


@pytest.mark.parametrize("cfg", SWA_CONFIGS, ids=lambda c: c.label)
def test_swa_hicache_write_back_plays_the_same_on_both_cores(cfg):
    """Write-back: nothing reaches the host before eviction, so the SWA walk holds an inner
    window with no host copy back until the controller has backed it up."""
    expected, expected_tree, _, _ = run_counting_held_back(cfg, "python", 120, 7)
    trace, tree, _, _ = run_counting_held_back(cfg, "uniradix", 120, 7)
    played = [s for s in expected if s[0] not in ("skip", "evict", "evict host", "held back")]
    assert any(s[1] for s in played), "no load-back"
    assert all(s[2] for s in played), "a prefix's KV is not what its requests wrote"
    assert expected[-1][1] > 0, "no SWA window held back for its backup"
    assert any(not r[1] and r[2] for r in expected_tree), "no host-only node"
    assert trace == expected
    assert tree == expected_tree
