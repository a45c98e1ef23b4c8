"""Every cache config of SGLang's conformance kit (sglang/test/kits/unified_radix_cache),
built by the kit's own `build_fixture`, on SGLang's Python core and on the uniradix core:
the FULL configs play the same request stream with the same results call by call and end
with the same tree; the others (SWA, Mamba) are refused when the cache is built, naming why.
The tally printed at the end is the figure docs/sglang.md gives."""

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
from tests.integrations.test_sglang_core import play  # noqa: E402

FULL_ONLY = (ComponentType.FULL,)


def build(cfg, core: str):
    factory = {"uniradix": lambda params, components: UniradixInspector(params, components)}
    # The kit builds on the accelerator; this machine may have none: the CPU then.
    with (
        mock.patch.dict(_TREE_CORE_REGISTRY, factory),
        mock.patch.object(fixtures, "get_device", return_value="cpu"),
    ):
        cache, _, _ = fixtures.build_fixture(cfg, tree_core_backend=core)
    return cache


def tree_shape(cache) -> list[tuple[int, ...]]:
    """Every node's tokens, read through the inspection interface: core-independent."""
    core = cache.tree_core
    root = cache.root_node_handle()
    return sorted(tuple(core.get_node_token_ids(n)) for n in core.get_all_node_ids() if n != root)


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.label for c in CONFIGS])
def test_kit_config_on_both_cores(cfg):
    python_cache = build(cfg, "python")
    if cfg.components != FULL_ONLY:
        names = [c.name for c in cfg.components]
        reason = re.escape(f"tree_components (FULL,) only, got {names!r}")
        with pytest.raises(ValueError, match=reason):
            build(cfg, "uniradix")
        return
    uniradix_cache = build(cfg, "uniradix")
    assert type(uniradix_cache.tree_core) is UniradixInspector
    expected = play(python_cache, cfg.page_size, n=400, seed=1)
    assert any(step[3] > 0 for step in expected if step[0] != "skip")
    assert play(uniradix_cache, cfg.page_size, n=400, seed=1) == expected
    assert tree_shape(uniradix_cache) == tree_shape(python_cache)
