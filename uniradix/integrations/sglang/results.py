"""SGLang's `MatchResult`, built at the cost of a plain tuple.

A `NamedTuple` called with keywords binds them one by one in Python, on every match.
`match_result` fills every field positionally through `tuple.__new__`, so it relies on
SGLang's field order, checked here when the module loads.
"""

from __future__ import annotations

from typing import Any

from sglang.srt.mem_cache.base_prefix_cache import MatchResult

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
