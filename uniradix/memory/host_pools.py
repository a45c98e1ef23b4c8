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


def aux_host_sizes(
    ratio: float, swa_tokens: int | None, mamba_slots: int | None, page_size: int
) -> tuple[int | None, int | None]:
    """The SWA host tokens and Mamba host slots beside a full-KV host pool `ratio` times its
    device pool: the same proportion of the device SWA tokens (whole pages, at least one)
    and Mamba slots (at least one); None where the device has no such pool."""
    host_swa = (
        None
        if swa_tokens is None
        else max(page_size, int(swa_tokens * ratio) // page_size * page_size)
    )
    host_mamba = None if mamba_slots is None else max(1, int(mamba_slots * ratio))
    return host_swa, host_mamba


class HostPools:
    """Host slot allocators by pool name: "full" KV, and with a hybrid model "swa" KV (whole
    pages) and "mamba" states (one slot each, page size 1)."""

    def __init__(
        self,
        full_tokens: int,
        page_size: int,
        swa_tokens: int | None = None,
        mamba_slots: int | None = None,
    ) -> None:
        self.full = TokenSlotAllocator(full_tokens, page_size)
        self.aux: dict[str, TokenSlotAllocator] = {}
        if swa_tokens is not None:
            self.aux["swa"] = TokenSlotAllocator(swa_tokens, page_size)
        if mamba_slots is not None:
            self.aux["mamba"] = TokenSlotAllocator(mamba_slots, 1)
        self.peak_used = {name: 0 for name in self.names()}

    def names(self) -> list[str]:
        return ["full", *self.aux]

    def pool(self, name: str) -> TokenSlotAllocator:
        return self.full if name == "full" else self.aux[name]

    def capacities(self) -> dict[str, int]:
        return {f"host_{n}": self.pool(n).capacity for n in self.names()}

    def available(self) -> dict[str, int]:
        return {f"host_{n}": self.pool(n).available_size() for n in self.names()}

    def note_usage(self) -> None:
        """Records the high-water mark of host slots in use, per pool."""
        for name in self.names():
            used = self.pool(name).used_size()
            if used > self.peak_used[name]:
                self.peak_used[name] = used

    def reset(self) -> None:
        self.full.reset()
        for pool in self.aux.values():
            pool.reset()
        self.peak_used = {name: 0 for name in self.names()}
