"""Every cache config of SGLang's conformance kit (sglang/test/kits/unified_radix_cache),
built by the kit's own `build_fixture`, on SGLang's Python core and on the uniradix core:
the FULL and FULL+SWA configs play the same request stream with the same results call by
call and end with the same tree (the SWA stream, `sglang_swa_stream`, also evicts SWA,
releases SWA locks early and frees out-of-window slots); the Mamba ones are refused when the
cache is built, naming why."""

from __future__ import annotations

import re
from unittest import mock

import pytest

from tests.integrations.sglang_env import load_sglang

load_sglang(kits=True)

from sglang.srt.mem_cache.unified_cache.component_type import ComponentType  # noqa: E402
from sglang.srt.mem_cache.unified_cache.tree_core_registry import (  # noqa: E402
    _TREE_CORE_REGISTRY,
)
from sglang.test.kits.unified_radix_cache import fixtures  # noqa: E402
from sglang.test.kits.unified_radix_cache.config import CONFIGS  # noqa: E402

from tests.integrations.sglang_inspector import UniradixInspector  # noqa: E402
from tests.integrations.sglang_swa_stream import play_swa  # noqa: E402
from tests.integrations.test_sglang_core import play  # noqa: E402

FULL_ONLY = (ComponentType.FULL,)
FULL_SWA = (ComponentType.FULL, ComponentType.SWA)
PORTED = [c for c in CONFIGS if c.components in (FULL_ONLY, FULL_SWA)]


def play_config(cache, cfg, n: int, seed: int) -> list[tuple]:
    if cfg.components == FULL_SWA:
        return play_swa(cache, cfg.page_size, cfg.sliding_window_size, n=n, seed=seed)
    return play(cache, cfg.page_size, n=n, seed=seed)


def build(cfg, core: str, **kwargs):
    factory = {"uniradix": lambda params, components: UniradixInspector(params, components)}
    # The kit builds on the accelerator; this machine may have none: the CPU then.
    with (
        mock.patch.dict(_TREE_CORE_REGISTRY, factory),
        mock.patch.object(fixtures, "get_device", return_value="cpu"),
    ):
        cache, _, _ = fixtures.build_fixture(cfg, tree_core_backend=core, **kwargs)
    return cache


def tree_shape(cache) -> list[tuple[int, ...]]:
    """Every node's tokens, read through the inspection interface: core-independent."""
    core = cache.tree_core
    root = cache.root_node_handle()
    return sorted(tuple(core.get_node_token_ids(n)) for n in core.get_all_node_ids() if n != root)


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.label for c in CONFIGS])
def test_kit_config_on_both_cores(cfg):
    python_cache = build(cfg, "python")
    if cfg not in PORTED:
        names = [c.name for c in cfg.components]
        reason = re.escape(f"tree_components (FULL,) and (FULL, SWA), got {names!r}")
        with pytest.raises(ValueError, match=reason):
            build(cfg, "uniradix")
        return
    uniradix_cache = build(cfg, "uniradix")
    assert type(uniradix_cache.tree_core) is UniradixInspector
    n = 400 if cfg.components == FULL_ONLY else 250
    expected = play_config(python_cache, cfg, n=n, seed=1)
    requests = [step for step in expected if not isinstance(step[0], str)]
    assert any(step[0] > 0 for step in requests)
    assert any(step[3] for step in requests)  # evictions ran
    if cfg.components == FULL_SWA:
        # Windows stopped matches short of the full KV, and SWA evictions tombstoned nodes.
        assert any(step[2] is not None for step in requests)
        assert any(step[0] == "swa-evict" and step[2] > 0 for step in expected)
    assert play_config(uniradix_cache, cfg, n=n, seed=1) == expected
    assert tree_shape(uniradix_cache) == tree_shape(python_cache)


@pytest.mark.parametrize("cfg", PORTED, ids=lambda c: c.label)
def test_kv_events_are_sglangs_own_on_both_cores(cfg):
    """The same BlockStored / BlockRemoved events (hashes, parents, tokens) in the same order."""
    events = {}
    for core in ("python", "uniradix"):
        cache = build(cfg, core, enable_kv_cache_events=True)
        # Enough requests to fill the kit's pool and evict (its page-1 requests are short).
        play_config(cache, cfg, n=400 if cfg.page_size == 1 else 100, seed=2)
        events[core] = cache.take_events()
    kinds = {type(e).__name__ for e in events["python"]}
    assert {"BlockStored", "BlockRemoved"} <= kinds
    assert events["uniradix"] == events["python"]
