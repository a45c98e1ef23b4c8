"""Memory budgets in bytes, split between a model's pools, turned into pool sizes.

A budget of `gpu_bytes` and a split (a fraction per pool, summing to 1) give each pool
`floor(gpu_bytes * fraction)` bytes; a token pool ("full", "swa") holds that many bytes'
worth of tokens *floored to whole pages*, a "mamba" pool that many whole state slots::

    llama-3-8b (131072 B/token), 40GB, full=1, page 16:
        40e9 // 131072 = 305175 tokens -> 19073 pages = 305168 tokens = 39998980096 bytes

so the pools never exceed the budget and `unused_bytes` says what the rounding left. The
request table (`req`, int32 token indices per running request) is not counted: it is
metadata, not cache. A host budget (the L2 tier) would size host pools the same way; this
branch's replay has no host tier yet, so only `gpu_bytes` exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from uniradix.plan.models import ModelSpec
from uniradix.sim.replay import ReplayOptions

UNIT_NAMES = {"full": "tokens", "swa": "tokens", "mamba": "slots"}
SPLIT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Split:
    """A fraction of the budget per pool, in pool order ("full", "swa", "mamba")."""

    fractions: tuple[tuple[str, float], ...]

    def __post_init__(self) -> None:
        total = sum(f for _, f in self.fractions)
        if any(not 0.0 <= f <= 1.0 for _, f in self.fractions) or abs(total - 1) > SPLIT_TOLERANCE:
            raise ValueError(f"split {self.label()} must be fractions in [0, 1] summing to 1")

    @classmethod
    def of(cls, pools: tuple[str, ...], fractions: dict[str, float]) -> Split:
        """The split giving `fractions[pool]` to each of `pools` (all of them, no other)."""
        if set(fractions) != set(pools):
            raise ValueError(
                f"a split for this model names exactly the pools {list(pools)}, "
                f"got {sorted(fractions)}"
            )
        return cls(tuple((p, float(fractions[p])) for p in pools))

    @classmethod
    def even(cls, pools: tuple[str, ...]) -> Split:
        return cls(tuple((p, 1 / len(pools)) for p in pools))

    @classmethod
    def parse(cls, text: str, pools: tuple[str, ...]) -> Split:
        """`full=0.6,swa=0.4` -> Split; ValueError naming the bad part."""
        fractions: dict[str, float] = {}
        for part in text.split(","):
            name, sep, value = part.partition("=")
            try:
                fractions[name.strip()] = float(value) if sep else math.nan
            except ValueError:
                raise ValueError(f"split part {part!r} is not POOL=FRACTION") from None
            if math.isnan(fractions[name.strip()]):
                raise ValueError(f"split part {part!r} is not POOL=FRACTION")
        return cls.of(pools, fractions)

    def as_dict(self) -> dict[str, float]:
        return dict(self.fractions)

    def label(self) -> str:
        return ",".join(f"{p}={f:.4g}" for p, f in self.fractions)


@dataclass(frozen=True)
class PoolSizes:
    """What a budget and a split give: `units` per pool (tokens or slots) and their `bytes`."""

    model: ModelSpec
    gpu_bytes: int
    split: Split
    page_size: int
    units: dict[str, int]
    bytes: dict[str, int]

    @property
    def unused_bytes(self) -> int:
        return self.gpu_bytes - sum(self.bytes.values())

    def replay_options(self, base: ReplayOptions) -> ReplayOptions:
        """`base` with this model's config, window, FLOPs shape and these pool sizes."""
        return replace(
            base,
            config=self.model.replay_config(),
            page_size=self.page_size,
            full_tokens=self.units["full"],
            swa_tokens=self.units.get("swa"),
            mamba_slots=self.units.get("mamba"),
            sliding_window=self.model.sliding_window or base.sliding_window,
            model=self.model.compute_shape(),
        )

    def describe(self) -> dict[str, Any]:
        """Per pool: fraction, bytes, units and their name, bytes per unit (for JSON)."""
        unit_bytes = self.model.unit_bytes()
        return {
            pool: {
                "fraction": fraction,
                "bytes": self.bytes[pool],
                "units": self.units[pool],
                "unit": UNIT_NAMES[pool],
                "bytes_per_unit": unit_bytes[pool],
            }
            for pool, fraction in self.split.fractions
        }


def size_pools(model: ModelSpec, gpu_bytes: int, split: Split, page_size: int) -> PoolSizes:
    """Pool sizes for `gpu_bytes` split by `split` (rounding as the module docstring says).
    ValueError when a pool the model needs gets less than one page or one slot."""
    if gpu_bytes < 1 or page_size < 1:
        raise ValueError(f"need gpu_bytes >= 1 and page_size >= 1, got {gpu_bytes}, {page_size}")
    if tuple(p for p, _ in split.fractions) != model.pools():
        raise ValueError(f"split {split.label()} does not match the pools {model.pools()}")
    unit_bytes = model.unit_bytes()
    units: dict[str, int] = {}
    for pool, fraction in split.fractions:
        share = math.floor(gpu_bytes * fraction)
        count = share // unit_bytes[pool]
        if pool != "mamba":
            count = count // page_size * page_size
        if count < (1 if pool == "mamba" else page_size):
            raise ValueError(
                f"{pool} gets {share} bytes of the {gpu_bytes}-byte budget ({split.label()}): "
                f"less than one {'state slot' if pool == 'mamba' else 'page'} "
                f"({unit_bytes[pool] * (1 if pool == 'mamba' else page_size)} bytes)"
            )
        units[pool] = count
    return PoolSizes(
        model,
        gpu_bytes,
        split,
        page_size,
        units,
        {pool: n * unit_bytes[pool] for pool, n in units.items()},
    )


def annotate_components(summary: dict[str, Any], sizes: PoolSizes) -> None:
    """Adds bytes, units and bytes per unit to each pool of a replay summary's `components`,
    and the budget to the summary (mutates `summary`)."""
    for pool, described in sizes.describe().items():
        summary["components"][pool].update(described)
    summary["budget"] = {
        "model": sizes.model.name,
        "gpu_bytes": sizes.gpu_bytes,
        "split": sizes.split.as_dict(),
        "unused_bytes": sizes.unused_bytes,
        "page_size": sizes.page_size,
    }
