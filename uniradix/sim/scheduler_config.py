"""The shared scheduler's settings, and the error it raises when no request can progress."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerConfig:
    """The scheduler's knobs: a group of the front ends' options (`uniradix.config`)."""

    group_title = "scheduler"
    max_running: int = 64
    chunk_size: int = 4096
    decode_reserve_ratio: float = 0.5
    check_invariants: bool = False
    # Hybrid caches: keep SWA windows and Mamba states where requests branch
    # (`uniradix.sim.placement`); `checkpoint_grid` None places none on a grid.
    checkpoint_placement: bool = True
    checkpoint_grid: int | None = 512
    prefetch_lookahead: int = 4  # waiting requests that prefetch from L3 (`sim.prefetching`)

    def __post_init__(self) -> None:
        if self.checkpoint_grid is not None and self.checkpoint_grid < 1:
            raise ValueError(f"checkpoint_grid={self.checkpoint_grid} must be None or >= 1")
        if self.max_running < 1 or self.chunk_size < 1:
            raise ValueError(
                f"max_running={self.max_running} and chunk_size={self.chunk_size} must be >= 1"
            )
        if not 0 <= self.prefetch_lookahead <= 16:
            raise ValueError(f"prefetch_lookahead={self.prefetch_lookahead} not in [0, 16]")
        if not 0.0 <= self.decode_reserve_ratio <= 1.0:
            raise ValueError(f"decode_reserve_ratio={self.decode_reserve_ratio} not in [0, 1]")


class SchedulerStalled(RuntimeError):
    """No request could make progress although work remains (a pool too small)."""
