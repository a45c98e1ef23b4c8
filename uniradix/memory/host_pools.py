"""HostPools: the host tier's slot accounting, one allocator per component pool.

Host slots are handed out a whole page at a time by the same `TokenSlotAllocator` the device
uses (page 0 reserved, so host tensors need `capacity + page_size` rows), with the same
double-free and foreign-slot detection. The tensors that hold the bytes live with the
copiers (`uniradix.memory.host_kv`); this module only says which host slot is whose.

Sizes: `host_tokens` slots, or `hicache_ratio` x the device pool's capacity, floored to
whole pages.
"""

from __future__ import annotations

from uniradix.memory.allocator import TokenSlotAllocator


def host_capacity(device_tokens: int, host_tokens: int | None, hicache_ratio: float | None) -> int:
    """Host slots for a device pool of `device_tokens`: exactly one of the two sizes given."""
    if (host_tokens is None) == (hicache_ratio is None):
        raise ValueError(
            f"give exactly one of host_tokens={host_tokens} and hicache_ratio={hicache_ratio}"
        )
    if host_tokens is not None:
        if not isinstance(host_tokens, int) or host_tokens <= 0:
            raise ValueError(f"host_tokens must be a positive int, got {host_tokens!r}")
        return host_tokens
    assert hicache_ratio is not None
    if not hicache_ratio > 0:
        raise ValueError(f"hicache_ratio must be > 0, got {hicache_ratio!r}")
    return int(device_tokens * hicache_ratio)


class HostPools:
    """Host slot allocators by pool name ("full" today; one per component pool)."""

    def __init__(self, full_tokens: int, page_size: int) -> None:
        self.full = TokenSlotAllocator(full_tokens, page_size)
        self.peak_used = {"full": 0}

    def capacities(self) -> dict[str, int]:
        return {"host_full": self.full.capacity}

    def available(self) -> dict[str, int]:
        return {"host_full": self.full.available_size()}

    def note_usage(self) -> None:
        """Records the high-water mark of host slots in use."""
        used = self.full.used_size()
        if used > self.peak_used["full"]:
            self.peak_used["full"] = used

    def reset(self) -> None:
        self.full.reset()
        self.peak_used = {"full": 0}
