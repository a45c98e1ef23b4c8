"""uniradix inside SGLang (extra `uniradix[sglang]`; SGLang 0.5.23).

Importing this package registers the TreeCore backend `"uniradix"` with SGLang, so
`SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=uniradix` runs SGLang's own `UnifiedRadixCache` on
uniradix's radix tree. SGLang's plugin loader calls `register` too (entry point
`sglang.srt.plugins: uniradix`), so an installed uniradix needs no import in SGLang's code.
`UniradixHiCacheStorage` (module `storage`) is an L3 backend for SGLang's HiCache, loaded
by its dynamic backend factory. This is the only package of uniradix that imports SGLang.
"""

from __future__ import annotations

from typing import Any

from sglang.srt.mem_cache.unified_cache import tree_core_registry

from uniradix.integrations.sglang.core import UniradixTreeCore
from uniradix.integrations.sglang.storage import UniradixHiCacheStorage

BACKEND = "uniradix"


def _factory(params: Any, components: dict[Any, Any]) -> UniradixTreeCore:
    return UniradixTreeCore(params, components)


def register() -> None:
    """Registers the `"uniradix"` TreeCore backend with SGLang (idempotent)."""
    if tree_core_registry.get_tree_core_factory(BACKEND) is None:
        tree_core_registry.register_tree_core_backend(BACKEND, _factory)


register()

__all__ = ["BACKEND", "UniradixHiCacheStorage", "UniradixTreeCore", "register"]
