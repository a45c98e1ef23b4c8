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
from uniradix.config import (
    CacheConfig,
    Eviction,
    Host,
    Nested,
    Pools,
    Requests,
    Sessions,
    Storage,
)
from uniradix.factory import build_cache
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
from uniradix.types import ComponentType

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
class ReplayOptions(Nested):
    """A replay: its requests, the cache's groups (`uniradix.config`) and the scheduler's.

    Where a replay's defaults differ from the library's they are set here, once: smaller
    pools with an SWA window ready for the SWA configs, the scheduler's batch sizes, and
    prefetches that run to their end (`wait_complete`: figures repeat run to run). The
    config name (`CONFIG_COMPONENTS`) decides which pools exist; SWA tokens default to half
    the full pool and Mamba slots to 4 per running request (`aux_device_sizes`)."""

    workload: str = "multi_turn"
    trace: str | None = None
    trace_format: str = "mooncake"
    config: str = "hybrid"
    max_requests: int | None = None
    seed: int = 0
    sessions: bool = False  # the session cache: sessions' contexts are evicted last
    progress: bool = False
    model: ModelShape = field(default_factory=ModelShape)
    pools: Pools = field(default_factory=lambda: Pools(full_tokens=8192, sliding_window=1024))
    scheduler: SchedulerConfig = field(
        default_factory=lambda: SchedulerConfig(max_running=32, chunk_size=2048)
    )
    eviction: Eviction = field(default_factory=Eviction)
    host: Host = field(default_factory=Host)
    storage: Storage = field(default_factory=lambda: Storage(prefetch_policy="wait_complete"))


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
    pools = options.pools
    return pools.swa_tokens or pools.full_tokens // 2, pools.mamba_slots or (
        4 * options.scheduler.max_running
    )


def build_replay_cache(
    options: ReplayOptions, config_name: str, max_context_len: int
) -> UnifiedRadixCache:
    components = CONFIG_COMPONENTS[config_name]
    swa = ComponentType.SWA in components
    mamba = ComponentType.MAMBA in components
    return build_cache(
        CacheConfig.embedded_in(
            options,
            pools=replace(
                options.pools,
                sliding_window=options.pools.sliding_window if swa else None,
                swa_tokens=aux_device_sizes(options)[0] if swa else None,
                mamba_slots=aux_device_sizes(options)[1] if mamba else None,
                mamba_extra_buffer=mamba and options.pools.page_size > 1,
            ),
            requests=Requests(options.scheduler.max_running, max_context_len),
            sessions=Sessions(options.sessions),
        )
    )


def run_replay(options: ReplayOptions) -> ReplayResult:
    """Replays `options`' requests; raises InvariantError on a broken invariant."""
    if options.config not in CONFIG_COMPONENTS:
        raise ValueError(
            f"unknown config {options.config!r}; choose from {sorted(CONFIG_COMPONENTS)}"
        )
    config_name = options.config
    ps, full_tokens = options.pools.page_size, options.pools.full_tokens
    loaded = load_specs(options, full_tokens // ps * ps)
    specs = admissible(loaded, full_tokens // ps * ps, ps)
    if not specs:
        raise ValueError(f"no request fits full_tokens={full_tokens}")
    max_len = max(len(s.prompt) + s.output_len for s in specs)
    cache = build_replay_cache(options, config_name, -(-max_len // ps) * ps)
    if cache.host_tier.storage is not None:
        cache.host_tier.storage.backpressure = cache.host_tier.storage.sync_writes = True
    t0 = time.perf_counter()
    ideal = ideal_hits(specs, ps)
    ideal_s = time.perf_counter() - t0
    metrics = ReplayMetrics(cache, len(specs), options.progress)
    listener = SessionListener(cache, specs, metrics)
    listener.set_ideal(specs, ideal)
    scheduler = Scheduler(cache, NullRunner(), specs, options.scheduler, listener)
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
        "page_size": options.pools.page_size,
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
