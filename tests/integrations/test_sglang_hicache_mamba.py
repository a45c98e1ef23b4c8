"""SGLang's HiCache on FULL+Mamba caches (Mamba host states), on the uniradix core and on
SGLang's Python core: SGLang's own `UnifiedRadixCache` and `HybridCacheController` (CPU
copies, see `sglang_hicache`) play the same stream on both (`sglang_mamba_hicache`), compared
call by call, with the KV and the Mamba states the matches find on the device (load-backs
included) checked against what the requests wrote, the same final tree on both tiers of both
components, and every pool whole again once everything is evicted."""

from __future__ import annotations

import pytest

from tests.integrations.sglang_env import load_sglang

load_sglang(kits=True)

from sglang.srt.mem_cache.unified_cache.component_type import ComponentType  # noqa: E402
from sglang.test.kits.unified_radix_cache.config import CONFIGS  # noqa: E402

from tests.integrations.sglang_hicache import (  # noqa: E402
    build_hicache_cache,
    cpu_hicache,
    events_on_both_cores,
    run_hicache,
)
from tests.integrations.sglang_hybrid_stream import Pools  # noqa: E402
from tests.integrations.sglang_mamba_hicache import (  # noqa: E402
    drain,
    host_sizes,
    mamba_tree_state,
    play_mamba_hicache,
)

FULL, MAMBA = ComponentType.FULL, ComponentType.MAMBA
MAMBA_CONFIGS = [c for c in CONFIGS if c.components == (FULL, MAMBA)]


def run(cfg, core: str, write_policy: str, n: int, seed: int, **kwargs):
    def play(cache, allocator):
        whole = Pools(cache).left(), host_sizes(cache)
        trace = play_mamba_hicache(cache, cfg, n, seed)
        return [*trace, ("whole", whole), ("drained", drain(cache))]

    return run_hicache(cfg, core, write_policy, play, mamba_tree_state, **kwargs)


@pytest.mark.parametrize(
    "cfg, write_policy, seed",
    [(c, "write_through", 7) for c in MAMBA_CONFIGS]
    + [(MAMBA_CONFIGS[1], "write_through_selective", 3)],  # a seed with a request load-back
    ids=lambda v: getattr(v, "label", v),
)
def test_mamba_hicache_plays_the_same_on_both_cores(cfg, write_policy, seed):
    expected, _, _, python_core = run(cfg, "python", write_policy, 150, seed)
    trace, _, _, uniradix_core = run(cfg, "uniradix", write_policy, 150, seed)
    assert (python_core, uniradix_core) == ("UnifiedTreeCoreInspector", "UniradixInspector")
    played = [
        s for s in expected if s[0] not in ("skip", "evict", "evict host", "whole", "drained")
    ]
    assert any(s[1] for s in played), "no load-back"
    own = [s[2] for s in played if s[2] is not None]
    assert own and all(own), "a request's own slot did not get the loaded state"
    assert any(s[0][2] for s in played), "no match ending at a state on the host only"
    assert all(s[3] for s in played), "a prefix's KV is not what its requests wrote"
    assert all(s[4] for s in played), "a matched Mamba state is not what its request wrote"
    assert any(s[7][0] for s in played), "no device eviction"
    assert sum(s[2] for s in expected if s[0] == "evict") > 0, "no Mamba tombstone"
    host = [s[2] for s in expected if s[0] == "evict host"]
    assert sum(states for _, states in host) > 0, "no Mamba host eviction"
    whole, drained = (s[1] for s in expected[-2:])
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
    events = events_on_both_cores(run, cfg, 80, 3)
    media = {str(getattr(e, "medium", None)) for e in events[0]}
    assert {"StorageMedium.GPU", "StorageMedium.CPU"} <= media, media
    assert events[1] == events[0]


def test_mamba_storage_is_refused_by_name():
    """L3 storage of a Mamba cache (its state pages) is not covered: refused when attached."""
    with cpu_hicache():
        cache, _, _ = build_hicache_cache(MAMBA_CONFIGS[1], "uniradix", "write_through")
        try:
            with pytest.raises(NotImplementedError, match="L3 storage of a Mamba cache"):
                cache.tree_core.enable_storage = True
        finally:
            cache.release_host_resources()
