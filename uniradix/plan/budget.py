"""Memory budgets in bytes, split between a model's pools, turned into pool sizes.

A budget of `gpu_bytes` and a split (a fraction per pool, summing to 1) give each pool
`floor(gpu_bytes * fraction)` bytes; a token pool ("full", "swa") holds that many bytes'
worth of tokens *floored to whole pages*, a "mamba" pool that many whole state slots::

    llama-3-8b (131072 B/token), 40GB, full=1, page 16:
        40e9 // 131072 = 305175 tokens -> 19073 pages = 305168 tokens = 39998980096 bytes

so the pools never exceed the budget and `unused_bytes` says what the rounding left. The
request table (`req`, int32 token indices per running request) is not counted: it is
metadata, not cache.

A host budget (`host_bytes`, the L2 tier) covers every host pool of the model: the host tier
sizes its SWA and Mamba host pools in the proportion of their device pools to the full-KV
one (`uniradix.memory.host_pools.aux_host_sizes`), so the budget buys the largest whole
number of full-KV host pages whose pools, with those beside it, fit::

    host_bytes >= host_full x B_full + host_swa x B_swa + host_mamba x B_state
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from uniradix.memory.host_pools import aux_host_sizes
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
class HostSizes:
    """What a host budget gives: `units` per host pool (tokens or slots) and their `bytes`."""

    host_bytes: int
    units: dict[str, int]
    bytes: dict[str, int]

    @property
    def unused_bytes(self) -> int:
        return self.host_bytes - sum(self.bytes.values())


def size_host_pools(
    model: ModelSpec, host_bytes: int, device_units: dict[str, int], page_size: int
) -> HostSizes:
    """Host pools for `host_bytes` beside device pools of `device_units` (per pool of the
    model), as the module docstring says; ValueError when not even one page of full KV
    with its auxiliary host pools fits."""
    unit_bytes = model.unit_bytes()
    if set(device_units) != set(unit_bytes):
        raise ValueError(f"device pools {sorted(device_units)} != the model's {model.pools()}")
    device_bytes = sum(device_units[p] * unit_bytes[p] for p in unit_bytes)
    page_bytes = unit_bytes["full"] * page_size
    full = math.floor(host_bytes * device_units["full"] / device_bytes) // page_size * page_size
    while full >= page_size:
        swa, mamba = aux_host_sizes(
            full / device_units["full"],
            device_units.get("swa"),
            device_units.get("mamba"),
            page_size,
        )
        units = {"full": full, "swa": swa, "mamba": mamba}
        sizes = {p: n for p, n in units.items() if n is not None and p in unit_bytes}
        used = {p: n * unit_bytes[p] for p, n in sizes.items()}
        over = sum(used.values()) - host_bytes
        if over <= 0:
            return HostSizes(host_bytes, sizes, used)
        full -= max(1, -(-over // page_bytes)) * page_size  # float rounding or a minimum pool
    raise ValueError(
        f"--host-cache: {host_bytes} bytes hold no page of {page_bytes} bytes of full KV "
        f"({unit_bytes['full']} bytes per token x page size {page_size}) with its host pools "
        f"of {', '.join(p for p in model.pools() if p != 'full') or 'nothing else'}"
    )


@dataclass(frozen=True)
class PoolSizes:
    """What a budget and a split give: `units` per pool (tokens or slots) and their `bytes`."""

    model: ModelSpec
    gpu_bytes: int
    split: Split
    page_size: int
    units: dict[str, int]
    bytes: dict[str, int]
    host: HostSizes | None = None  # the L2 host pools of a host budget (`with_host`)

    @property
    def unused_bytes(self) -> int:
        return self.gpu_bytes - sum(self.bytes.values())

    def with_host(self, host_bytes: int) -> PoolSizes:
        """These device pools with the host pools `host_bytes` buys beside them."""
        return replace(
            self, host=size_host_pools(self.model, host_bytes, self.units, self.page_size)
        )

    def replay_options(self, base: ReplayOptions) -> ReplayOptions:
        """`base` with this model's config, window, FLOPs shape and these pool sizes."""
        return base.updated(
            config=self.model.replay_config(),
            page_size=self.page_size,
            full_tokens=self.units["full"],
            swa_tokens=self.units.get("swa"),
            mamba_slots=self.units.get("mamba"),
            host_tokens=base.host.host_tokens if self.host is None else self.host.units["full"],
            sliding_window=self.model.sliding_window or base.pools.sliding_window,
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
    if sizes.host is not None:
        annotate_host_pools(summary, sizes.model, sizes.host)


def annotate_host_pools(summary: dict[str, Any], model: ModelSpec, host: HostSizes) -> None:
    """Adds bytes and bytes per unit to each host pool of a replay summary's `components`,
    and the host budget to `summary["budget"]` (mutates `summary`)."""
    unit_bytes = model.unit_bytes()
    for pool, num in host.bytes.items():
        summary["components"][f"host_{pool}"].update(
            {"bytes": num, "units": host.units[pool], "bytes_per_unit": unit_bytes[pool]}
        )
    budget = summary.setdefault("budget", {"model": model.name})
    budget |= {"host_bytes": host.host_bytes, "host_unused_bytes": host.unused_bytes}
