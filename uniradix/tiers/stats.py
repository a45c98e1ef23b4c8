"""HostTierStats: what the host tier moved or dropped, counted in place by its parts."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class HostTierStats:
    """Units (tokens) moved or dropped by the host tier since the cache was built."""

    written_tokens: int = 0  # D->H backups submitted
    loaded_tokens: int = 0  # H->D load-backs submitted
    demoted_tokens: int = 0  # device copies dropped with the host copy kept
    lost_tokens: int = 0  # device evictions of data with no host copy (real losses)
    host_evicted_tokens: int = 0  # host-only data dropped by host eviction
    write_skipped_tokens: int = 0  # backups the host pool could not take
    load_skipped: int = 0  # load-backs declined (threshold, quota)
    load_failed: int = 0  # load-backs that found no device room (they recompute)
    load_copy_failed: int = 0  # load-backs whose copy raised (undone: they recompute)
    write_failed_tokens: int = 0  # backups whose copy raised (host copies dropped)
    # auxiliary components by name ("swa" slots, "mamba" states)
    aux_written: dict[str, int] = field(default_factory=dict)
    aux_loaded: dict[str, int] = field(default_factory=dict)
    aux_write_skipped: dict[str, int] = field(default_factory=dict)
    aux_host_evicted: dict[str, int] = field(default_factory=dict)
    host_insert_dropped_tokens: int = 0  # `insert_host` pages with no host parent to join

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
