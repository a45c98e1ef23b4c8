"""SGLang's result objects built for less than their constructors' defaults cost.

A `NamedTuple` called with keywords binds them one by one in Python, on every match.
`match_result` fills every field positionally through `tuple.__new__`, so it relies on
SGLang's field order, checked here when the module loads. The eviction steps' results
(msgspec structs) get their four containers passed in order, which the same check covers:
msgspec calls a Python factory per container otherwise, on every eviction step.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sglang.srt.mem_cache.base_prefix_cache import MatchResult
from sglang.srt.mem_cache.unified_cache.unified_tree_core_interface import (
    EvictDeviceLeafResult,
    EvictDeviceNextNodeResult,
)

_FIELDS = (
    "device_prefix_len",
    "last_device_node",
    "last_host_node",
    "best_match_node",
    "host_hit_length",
    "swa_host_hit_length",
    "swa_branching_seqlen",
    "mamba_host_hit_length",
    "mamba_branching_seqlen",
    "cache_protected_len",
    "full_kv_hit_length",
    "cache_actions",
    "last_visited_node_id",
    "full_device_match_len",
)
if MatchResult._fields != _FIELDS:
    raise ImportError(
        f"uniradix's SGLang core builds MatchResult{_FIELDS}, this SGLang has "
        f"MatchResult{MatchResult._fields}"
    )

_CONTAINERS = ("device_frees", "host_frees", "tracker", "cache_actions")
for _result in (EvictDeviceNextNodeResult, EvictDeviceLeafResult):
    if _result.__struct_fields__[:4] != _CONTAINERS:
        raise ImportError(
            f"uniradix's SGLang core builds {_result.__name__}{_CONTAINERS}, this SGLang has "
            f"{_result.__name__}{_result.__struct_fields__}"
        )

_new = tuple.__new__


def match_result(
    device_len: int,
    best_node: int,
    last_visited_node: int,
    swa_branching: int | None,
    mamba_branching: int | None,
    full_kv_hit_length: int,
) -> Any:
    """A device-tier match: no host hit, no actions (SGLang's field defaults elsewhere)."""
    return _new(
        MatchResult,
        (
            device_len,
            best_node,
            best_node,
            best_node,
            0,
            0,
            swa_branching,
            0,
            mamba_branching,
            None,
            full_kv_hit_length,
            [],  # SGLang's controller consumes it in place (a list, each match its own)
            last_visited_node,
            None,
        ),
    )


def next_node_result() -> Any:
    """An eviction walk step's result: nothing freed, no node yet."""
    return EvictDeviceNextNodeResult(defaultdict(list), defaultdict(list), defaultdict(int), [])


def leaf_result() -> Any:
    """A leaf eviction's result: nothing freed yet."""
    return EvictDeviceLeafResult(defaultdict(list), defaultdict(list), defaultdict(int), [])
