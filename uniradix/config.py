"""The cache's configuration: one nested `CacheConfig`, every knob declared once in its group.

A group is a frozen dataclass of the knobs of one concern (pool sizes, request rows, tensor
shapes, eviction orders, host tier, L3 storage, sessions). `CacheConfig` holds one of each,
and every front end (`ReplayOptions`, `EngineConfig`, `GenerateOptions`, the planner) embeds
the groups it exposes instead of re-declaring their knobs; a front end whose defaults differ
overrides them in one place, its own default group instances.

Knob names are unique across the groups of a config, so a flat keyword still names one knob:
`CacheConfig.of(full_tokens=4096, host_tokens=8192)` and `config.updated(page_size=16)` route
each name to its group (`Nested`); an unknown name is a ValueError naming it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import torch

from uniradix.types import DEFAULT_AUX_EVICTION_POLICY, DEFAULT_SWA_EVICTION_POLICY

if TYPE_CHECKING:
    from uniradix.storage.backend import StorageBackend


def is_group(value: object) -> bool:
    """A knob group: a dataclass instance whose class names its `group_title`."""
    return dataclasses.is_dataclass(value) and hasattr(type(value), "group_title")


class Nested:
    """`of` / `updated` / `flat` for a frozen dataclass whose fields are knobs or groups:
    flat knob names are routed to the group that declares them."""

    @classmethod
    def of(cls, **flat: Any) -> Self:
        """An instance from the defaults, with the given knobs (flat names) set."""
        return cls().updated(**flat)

    def updated(self, **flat: Any) -> Self:
        """A copy with the given knobs set; a group's own field name replaces the group."""
        own = {f.name for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        direct = {k: v for k, v in flat.items() if k in own}
        routed: dict[str, dict[str, Any]] = {}
        for name, value in flat.items():
            if name in own:
                continue
            group = _owner(self, name)
            if group is None:
                raise ValueError(f"unknown {type(self).__name__} setting {name!r}")
            routed.setdefault(group, {})[name] = value
        for group, knobs in routed.items():
            current = direct.get(group, getattr(self, group))
            direct[group] = (
                current.updated(**knobs)
                if isinstance(current, Nested)
                else dataclasses.replace(current, **knobs)
            )
        return dataclasses.replace(self, **direct)  # type: ignore[type-var]

    def flat(self) -> dict[str, Any]:
        """Every knob by its flat name (groups opened)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if is_group(value):
                out.update(value.flat() if isinstance(value, Nested) else _fields(value))
            else:
                out[f.name] = value
        return out


def _fields(group: object) -> dict[str, Any]:
    return {f.name: getattr(group, f.name) for f in dataclasses.fields(group)}  # type: ignore[arg-type]


def _owner(config: object, name: str) -> str | None:
    """The field of `config` holding the group that declares knob `name`."""
    for f in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, f.name)
        if not is_group(value):
            continue
        knobs = value.flat() if isinstance(value, Nested) else _fields(value)
        if name in knobs:
            return f.name
    return None


def group_of(config: object, name: str) -> str | None:
    """The title of the group of `config` declaring knob `name`; None for its own fields."""
    owner = _owner(config, name)
    return None if owner is None else str(type(getattr(config, owner)).group_title)


@dataclass(frozen=True)
class Pools:
    """Device pool sizes. `sliding_window` set: the model has SWA layers reading that many
    tokens, and the cache an SWA pool of `swa_tokens` slots (default `full_tokens`; a smaller
    pool is the point of SWA). `mamba_slots` set: the model has Mamba layers sharing that many
    state slots (1 per running request; with `mamba_extra_buffer`, which page_size > 1 needs,
    up to 2 more while a tracked state waits to be published) with the tree's checkpoints.
    Mamba states are checkpointed at multiples of `lcm(mamba_cache_chunk_size, page_size)`,
    at most `mamba_max_states_per_path` along one root-to-node path (None: no cap)."""

    group_title = "pools"
    full_tokens: int = 65536
    page_size: int = 1
    device: str = "cpu"
    sliding_window: int | None = None
    swa_tokens: int | None = None
    mamba_slots: int | None = None
    mamba_extra_buffer: bool = False
    mamba_cache_chunk_size: int = 1
    mamba_max_states_per_path: int | None = None


@dataclass(frozen=True)
class Requests:
    """The request-to-token table: rows and their length; `is_eagle` keys pairs of tokens."""

    group_title = "requests"
    max_running_requests: int = 256
    max_context_len: int = 8192
    is_eagle: bool = False


@dataclass(frozen=True)
class Tensors:
    """Shapes and element types of the pools' tensors; `num_*_layers=0` keeps only the slot
    accounting (simulation). An engine verifying against a float64 reference stores float64."""

    group_title = "tensors"
    num_full_layers: int = 0
    num_swa_layers: int = 0
    num_kv_heads: int = 1
    head_dim: int = 1
    kv_dtype: torch.dtype = torch.float32
    num_mamba_layers: int = 0
    mamba_conv_shape: tuple[int, ...] = (1,)
    mamba_temporal_shape: tuple[int, ...] = (1,)
    mamba_dtype: torch.dtype = torch.float32


@dataclass(frozen=True)
class Eviction:
    """Eviction orders: of full KV (`eviction_policy`), of Mamba states
    (`aux_eviction_policy`) and of SWA windows (`swa_eviction_policy`), each "reuse_credit"
    (the default) or "lru" (`uniradix.eviction.orders`)."""

    group_title = "eviction"
    eviction_policy: str = "lru"
    aux_eviction_policy: str = DEFAULT_AUX_EVICTION_POLICY
    swa_eviction_policy: str = DEFAULT_SWA_EVICTION_POLICY


@dataclass(frozen=True)
class Host:
    """The L2 host tier (`uniradix.tiers`), on with `host_tokens` (or `hicache_ratio` x the
    device full pool), driven by `write_policy`; load-backs shorter than `load_back_threshold`
    tokens are skipped. With model layers the host holds real tensors in `host_layout`
    ("layer_first" or "page_first"), moved by `host_engine` ("sync", "thread" or "cuda")."""

    group_title = "host tier"
    host_tokens: int | None = None
    hicache_ratio: float | None = None
    write_policy: str = "write_through"
    load_back_threshold: int = 1
    host_layout: str = "layer_first"
    host_engine: str = "sync"

    @property
    def enabled(self) -> bool:
        return self.host_tokens is not None or self.hicache_ratio is not None


@dataclass(frozen=True)
class Storage:
    """An L3 store under the host tier (`uniradix.tiers.storage_tier`): `storage_backend`, an
    open one to share (wins over the URL), or one opened from `storage_url`.
    `model_fingerprint` (model id + revision) isolates stored pages; a prefetch starts past
    `prefetch_threshold` tokens and stops by `prefetch_policy` ("best_effort",
    "wait_complete" or "timeout")."""

    group_title = "L3 storage"
    storage_url: str | None = None
    storage_backend: StorageBackend | None = None
    model_fingerprint: str = "uniradix-sim"
    prefetch_threshold: int = 256
    prefetch_policy: str = "best_effort"

    @property
    def enabled(self) -> bool:
        return self.storage_url is not None or self.storage_backend is not None


@dataclass(frozen=True)
class Sessions:
    """The session cache (`uniradix.sessions`): finished turns' context stays covered."""

    group_title = "sessions"
    enable_session_cache: bool = False


@dataclass(frozen=True)
class CacheConfig(Nested):
    """Everything `build_cache` builds a cache from, by group; `disable_radix_cache` builds
    a cache that matches nothing (`uniradix.cache.disabled`)."""

    pools: Pools = field(default_factory=Pools)
    requests: Requests = field(default_factory=Requests)
    tensors: Tensors = field(default_factory=Tensors)
    eviction: Eviction = field(default_factory=Eviction)
    host: Host = field(default_factory=Host)
    storage: Storage = field(default_factory=Storage)
    sessions: Sessions = field(default_factory=Sessions)
    disable_radix_cache: bool = False

    @classmethod
    def embedded_in(cls, front: object, **groups: Any) -> CacheConfig:
        """The config of a front end (`ReplayOptions`, `EngineConfig`): every group it embeds
        under this config's field name, then `groups` (those the front end derives) on top,
        so no front end copies its groups over by hand."""
        found = {}
        for f in dataclasses.fields(cls):
            value = getattr(front, f.name, None)
            if is_group(value):
                found[f.name] = value
        return cls(**{**found, **groups})
