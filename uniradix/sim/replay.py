"""The replayer: a trace or workload through the real cache, driven by the scheduler with a
runner that computes nothing, and the summary of what happened.

The replay moves no tensor data, but every cache and pool call is the one an engine makes, so
its hit rates are the engine's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.factory import CacheConfig, build_cache
from uniradix.sim.batch import ForwardBatch, RunningRequest
from uniradix.sim.compute import ModelShape
from uniradix.sim.host_summary import host_summary
from uniradix.sim.ideal import ideal_hits
from uniradix.sim.metrics import ReplayMetrics
from uniradix.sim.request_spec import RequestSpec
from uniradix.sim.scheduler import Scheduler
from uniradix.sim.scheduler_config import SchedulerConfig
from uniradix.sim.sessions import SessionListener
from uniradix.sim.traces import load_trace
from uniradix.sim.workloads import generate_workload
from uniradix.storage.backend import StorageBackend
from uniradix.types import (
    DEFAULT_AUX_EVICTION_POLICY,
    DEFAULT_SWA_EVICTION_POLICY,
    ComponentType,
)

CONFIG_COMPONENTS: dict[str, tuple[ComponentType, ...]] = {
    "full": (ComponentType.FULL,),
    "swa": (ComponentType.FULL, ComponentType.SWA),
    "mamba": (ComponentType.FULL, ComponentType.MAMBA),
    "hybrid": (ComponentType.FULL, ComponentType.SWA, ComponentType.MAMBA),
}


class NullRunner:
    """Computes nothing: each sampling entry returns the request's next predetermined output
    token (`RequestSpec.output_ids`, drawn by a seeded generator)."""

    def forward(self, batch: ForwardBatch) -> list[int]:
        return [
            int(e.request.spec.output_ids[e.request.num_output]) for e in batch.entries if e.samples
        ]

    def next_outputs(self, request: RunningRequest, num: int) -> np.ndarray:
        """The next `num` outputs at once (`uniradix.sim.bulk_decode`)."""
        return request.spec.output_ids[request.num_output : request.num_output + num]


@dataclass(frozen=True)
class ReplayOptions:
    workload: str = "multi_turn"
    trace: str | None = None
    trace_format: str = "mooncake"
    config: str = "hybrid"
    page_size: int = 1
    full_tokens: int = 8192
    swa_tokens: int | None = None
    sliding_window: int = 1024
    mamba_slots: int | None = None
    max_running: int = 32
    chunk_size: int = 2048
    decode_reserve_ratio: float = 0.5
    max_requests: int | None = None
    seed: int = 0
    check_invariants: bool = False
    sessions: bool = False  # the session cache: sessions' contexts are evicted last
    checkpoint_placement: bool = True
    checkpoint_grid: int | None = 512
    aux_eviction_policy: str = DEFAULT_AUX_EVICTION_POLICY
    swa_eviction_policy: str = DEFAULT_SWA_EVICTION_POLICY
    model: ModelShape = field(default_factory=ModelShape)
    host_tokens: int | None = None
    hicache_ratio: float | None = None
    write_policy: str = "write_through"
    progress: bool = False
    storage_url: str | None = None  # an L3 store under the host tier
    storage_backend: StorageBackend | None = None  # an open one to share (instances)
    model_fingerprint: str = "uniradix-sim"
    # wait_complete: every fetch runs to its end, so the figures repeat run to run
    prefetch_policy: str = "wait_complete"


@dataclass
class ReplayResult:
    summary: dict[str, Any]
    hit_lengths: list[int]
    cumulative_hit_rate: list[float]
    ideal_cumulative_hit_rate: list[float]
    timeline: dict[str, list[int]]
    cumulative_host_hit_rate: list[float] = field(default_factory=list)


def load_specs(options: ReplayOptions, max_sequence_len: int | None = None) -> list[RequestSpec]:
    """The requests of `options`; trace rows longer than `max_sequence_len` are capped before
    any allocation (see `uniradix.sim.traces`)."""
    if options.trace is not None:
        return load_trace(
            options.trace,
            options.trace_format,
            options.max_requests,
            options.seed,
            max_sequence_len,
        )
    return generate_workload(options.workload, options.seed, options.max_requests)


def admissible(specs: list[RequestSpec], capacity: int, page_size: int) -> list[RequestSpec]:
    """The requests whose whole sequence fits the pool (a server rejects the others),
    renumbered; a request that waited on a rejected one no longer waits."""
    kept: dict[int, int] = {}
    out: list[RequestSpec] = []
    for spec in specs:
        total = len(spec.prompt) + spec.output_len
        if -(-total // page_size) * page_size > capacity:
            continue
        kept[spec.rid] = len(out)
        after = None if spec.after is None else kept.get(spec.after)
        out.append(replace(spec, rid=len(out), after=after))
    return out


def aux_device_sizes(options: ReplayOptions) -> tuple[int, int]:
    """The device SWA tokens and Mamba slots a replay gets (for a model that has them)."""
    return options.swa_tokens or options.full_tokens // 2, options.mamba_slots or (
        4 * options.max_running
    )


def build_replay_cache(
    options: ReplayOptions, config_name: str, max_context_len: int
) -> UnifiedRadixCache:
    components = CONFIG_COMPONENTS[config_name]
    swa = ComponentType.SWA in components
    mamba = ComponentType.MAMBA in components
    return build_cache(
        CacheConfig(
            full_tokens=options.full_tokens,
            page_size=options.page_size,
            max_running_requests=options.max_running,
            max_context_len=max_context_len,
            sliding_window=options.sliding_window if swa else None,
            swa_tokens=aux_device_sizes(options)[0] if swa else None,
            mamba_slots=aux_device_sizes(options)[1] if mamba else None,
            mamba_extra_buffer=mamba and options.page_size > 1,
            host_tokens=options.host_tokens,
            hicache_ratio=options.hicache_ratio,
            write_policy=options.write_policy,
            enable_session_cache=options.sessions,
            aux_eviction_policy=options.aux_eviction_policy,
            swa_eviction_policy=options.swa_eviction_policy,
            storage_url=options.storage_url,
            storage_backend=options.storage_backend,
            model_fingerprint=options.model_fingerprint,
            prefetch_policy=options.prefetch_policy,
        )
    )


def run_replay(options: ReplayOptions) -> ReplayResult:
    """Replays `options`' requests; raises InvariantError on a broken invariant."""
    if options.config not in CONFIG_COMPONENTS:
        raise ValueError(
            f"unknown config {options.config!r}; choose from {sorted(CONFIG_COMPONENTS)}"
        )
    config_name = options.config
    ps = options.page_size
    loaded = load_specs(options, options.full_tokens // ps * ps)
    specs = admissible(loaded, options.full_tokens // ps * ps, ps)
    if not specs:
        raise ValueError(f"no request fits full_tokens={options.full_tokens}")
    max_len = max(len(s.prompt) + s.output_len for s in specs)
    cache = build_replay_cache(options, config_name, -(-max_len // ps) * ps)
    if cache.host_tier.storage is not None:
        cache.host_tier.storage.backpressure = cache.host_tier.storage.sync_writes = True
    t0 = time.perf_counter()
    ideal = ideal_hits(specs, ps)
    ideal_s = time.perf_counter() - t0
    metrics = ReplayMetrics(cache, len(specs), options.progress)
    config = scheduler_config(options)
    listener = SessionListener(cache, specs, metrics)
    listener.set_ideal(specs, ideal)
    scheduler = Scheduler(cache, NullRunner(), specs, config, listener)
    t0 = time.perf_counter()
    try:
        scheduler.run()
    finally:
        metrics.close()
    cache.host_tier.drain()  # the last steps' backups land before the leak check
    if cache.host_tier.storage is not None:
        cache.host_tier.storage.flush()  # and their L3 copies, before the counters are read
    wall_s = time.perf_counter() - t0
    scheduler.check_invariants()
    summary = _summary(options, config_name, specs, len(loaded), ideal, metrics, scheduler)
    summary.update(listener.summary())
    summary.update(wall_s=wall_s, ideal_s=ideal_s, requests_per_s=len(specs) / max(wall_s, 1e-9))
    kept_lines = {s.source_line for s in specs}
    summary["rejected_lines"] = [
        s.source_line
        for s in loaded
        if s.source_line is not None and s.source_line not in kept_lines
    ]
    ideal_rates, total_prompt, total_ideal = [], 0, 0
    for spec, hit in zip(specs, ideal, strict=True):
        total_prompt += len(spec.prompt)
        total_ideal += hit
        ideal_rates.append(total_ideal / total_prompt)
    return ReplayResult(
        summary,
        metrics.hit_lengths,
        metrics.cumulative_hit_rate,
        ideal_rates,
        metrics.timeline,
        metrics.cumulative_host_hit_rate,
    )


def scheduler_config(options: ReplayOptions) -> SchedulerConfig:
    """The scheduler settings a replay (one instance or a cluster's) runs with."""
    return SchedulerConfig(
        options.max_running,
        options.chunk_size,
        options.decode_reserve_ratio,
        options.check_invariants,
        checkpoint_placement=options.checkpoint_placement,
        checkpoint_grid=options.checkpoint_grid,
    )


def _summary(
    options: ReplayOptions,
    config_name: str,
    specs: list[RequestSpec],
    num_loaded: int,
    ideal: list[int],
    metrics: ReplayMetrics,
    scheduler: Scheduler,
) -> dict[str, Any]:
    prompt_tokens, hit_tokens = metrics.prompt_tokens, metrics.hit_tokens
    ideal_tokens = sum(ideal)
    model = options.model
    saved = sum(model.prefix_flops(h) for h in metrics.hit_lengths)
    total = sum(model.prefix_flops(len(s.prompt)) for s in specs)
    host = host_summary(
        scheduler.cache, hit_tokens, metrics.host_hit_tokens, model.kv_bytes_per_token
    )
    components, leaked = metrics.components(), metrics.leaked()
    components.update(host.pop("host_components", {}))
    leaked.update(host.pop("host_leaked", {}))
    return {
        "source": options.trace or options.workload,
        "config": config_name,
        "page_size": options.page_size,
        "requests": metrics.finished,
        "rejected": num_loaded - len(specs),
        "prompt_tokens": prompt_tokens,
        "hit_tokens": hit_tokens,
        "hit_rate": hit_tokens / max(prompt_tokens, 1),
        **host,
        "ideal_hit_tokens": ideal_tokens,
        "ideal_hit_rate": ideal_tokens / max(prompt_tokens, 1),
        "decode_tokens": metrics.decode_tokens,
        "retractions": metrics.retractions,
        "recomputed_tokens": metrics.recomputed_tokens,
        "components": components,
        "leaked": leaked,
        "tombstones": metrics.tombstones(),
        "lost_hits": metrics.lost_hits.summary() if metrics.lost_hits.enabled else None,
        "steps": scheduler.num_steps,
        "invariant_checks": scheduler.num_invariant_checks,
        "prefill_flops": {
            "model": vars(model),
            "total": total,
            "saved": saved,
            "saved_fraction": saved / total if total else 0.0,
        },
    }
