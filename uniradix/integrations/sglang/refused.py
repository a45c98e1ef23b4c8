"""What the uniradix TreeCore does not cover yet, refused loudly.

`check_supported` runs when SGLang builds the cache, so an unsupported configuration fails
at start-up with the reason instead of misbehaving while serving; so do the host-tier
setting this core does not cover (`host_swa.py`: SGLang's device-only SWA ring).
`RefusedTreeCoreMethods` gives the rest of SGLang's `UnifiedTreeCoreInterface` (buffer mode
and its SWA steps, external linker) bodies that raise
`NotImplementedError` naming the method and what it needs; SGLang's controller calls none of
them on a device-tier cache, nor on a HiCache cache of any supported components under any
write policy, with or without an L3 storage backend (SWA host windows: `host_swa.py`; Mamba
host states: `host_mamba.py`; write-back's held-back inner evictions: `host_held_back.py`;
page hashes and storage calls: `host_storage.py`, `host_swa_storage.py`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, NoReturn

from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.unified_tree_core_interface import (
    UnifiedTreeCoreInterface,
)

_FULL, _SWA, _MAMBA = ComponentType.FULL, ComponentType.SWA, ComponentType.MAMBA
SUPPORTED_COMPONENTS = ((_FULL,), (_FULL, _SWA), (_FULL, _MAMBA), (_FULL, _SWA, _MAMBA))
_BUFFER = "SGLang's buffer-mode host tier (hicache_host_memory_mode=buffer_only)"
_AUX = "SGLang's buffer-mode SWA steps or custom component sizes"
_LINKER = "SGLang's external cache linker"


def check_supported(params: Any) -> None:
    """Raises ValueError naming the first setting of `params` this core does not support."""
    components = tuple(params.tree_components or ())
    if components not in SUPPORTED_COMPONENTS:
        names = [c.name for c in components]
        raise ValueError(
            f"the uniradix TreeCore supports tree_components FULL with SWA and/or MAMBA, "
            f"in that order, got {names}"
        )
    refused = {
        "enable_session_radix_cache": "session-aware caching",
        "component_registry_override": "custom components",
    }
    # SGLang keys a Mamba cache by tokens even for EAGLE (its cores drop bigrams there).
    if _MAMBA not in components:
        refused["is_eagle"] = "EAGLE bigram keys"
    for name, what in refused.items():
        if getattr(params, name, None):
            raise ValueError(f"the uniradix TreeCore does not support {what} ({name}=True)")


def _refused(method: str, needs: str) -> Callable[..., NoReturn]:
    def refuse(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"uniradix TreeCore: {method} needs {needs}, which this core does not support yet"
        )

    refuse.__name__ = method
    return refuse


# What each refused method needs, by the methods that need it.
_REFUSED = {
    "SGLang's Python tree nodes": ("node_by_id",),
    _BUFFER: ("snapshot_buffer_backup", "validate_buffer_backup"),
    _AUX: (
        "swa_tombstone_ranges",
        "attach_swa_window",
        "adjust_component_size",
    ),
    _LINKER: (
        "build_external_linker_offload_transfers",
        "mark_external_cache_stored_path",
        "mark_external_linker_offload_pending",
        "finish_external_linker_offload",
    ),
}


def _refuse_listed(cls: type) -> type:
    """Gives `cls` a refusing body for every method of `_REFUSED`; the interface declares
    them abstract, so its abstract set is recomputed once they are defined."""
    for needs, methods in _REFUSED.items():
        for method in methods:
            setattr(cls, method, _refused(method, needs))
    abc.update_abstractmethods(cls)
    return cls


@_refuse_listed
class RefusedTreeCoreMethods(UnifiedTreeCoreInterface):  # type: ignore[misc]
    """The interface methods outside the FULL device tier, each refused by name (`_REFUSED`)."""
