"""Engine: greedy generation with the tiny model on uniradix's pools, and its verification.

The engine is the replayer's scheduler (`uniradix.sim.scheduler`) with a runner that computes
(`PoolRunner`): continuous batching, chunked prefill, prefix matching and locking, publishing
each chunk, Mamba copy-on-write, checkpoints and tracking, SWA out-of-window frees, eviction
and retraction under memory pressure — every cache call is the replayer's. The cache persists
across `generate` calls, as a server's would.

`verify` reruns every prompt with no cache at all (`reference_generate` on a plain store) and
compares: the only proof that the cache served the right KV and states is that the model
generates exactly the same tokens, from the same logits, with and without it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

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
    Tensors,
)
from uniradix.engine.dense_state import reference_generate
from uniradix.engine.model import TinyHybridModel
from uniradix.engine.runner import PoolRunner
from uniradix.factory import build_cache
from uniradix.sim.batch import RunningRequest, SchedulerView
from uniradix.sim.metrics import ReplayMetrics
from uniradix.sim.request_spec import RequestSpec, TokenPrompt
from uniradix.sim.scheduler import Scheduler
from uniradix.sim.scheduler_config import SchedulerConfig
from uniradix.types import ComponentType


@dataclass(frozen=True)
class EngineConfig(Nested):
    """The cache's groups (`uniradix.config`) and the scheduler's, at an engine's defaults.

    The model decides the rest: its layer pattern the components (SWA layers add the SWA
    pool, `swa_tokens` default `full_tokens`; Mamba layers `mamba_slots` state slots, default
    4 per running request, and page_size > 1 the extra buffer, 3 slots per request), its
    window `sliding_window`, its device and dtype the pools' (the pools group's
    `sliding_window` and `device` are not read). `max_context_len` is the longest request."""

    max_context_len: int = 2048
    pools: Pools = field(default_factory=lambda: Pools(full_tokens=4096))
    scheduler: SchedulerConfig = field(
        default_factory=lambda: SchedulerConfig(max_running=16, chunk_size=64)
    )
    eviction: Eviction = field(default_factory=Eviction)
    host: Host = field(default_factory=Host)
    storage: Storage = field(
        default_factory=lambda: Storage(
            model_fingerprint="uniradix-tiny", prefetch_policy="wait_complete"
        )
    )
    sessions: Sessions = field(default_factory=Sessions)


@dataclass
class GenerateResult:
    """`tokens[i]` and `logits[i]` (`[max_new_tokens, vocab]`, CPU) are prompt `i`'s outputs
    and the rows they were chosen from. `hit_lengths` are the prefix hits in admission order
    (first admissions only, as `hit_tokens`). Tombstone and out-of-window figures are peaks over
    the steps; `evicted_tokens` counts the scheduler's evictions per pool; `leaked` is, per
    pool, what is neither free nor evictable once every request finished (must be 0)."""

    tokens: list[list[int]]
    logits: list[torch.Tensor]
    prompt_tokens: int
    hit_tokens: int
    hit_lengths: list[int]
    evicted_tokens: dict[str, int]
    retractions: int
    recomputed_tokens: int
    swa_tombstones: int
    mamba_tombstones: int
    swa_freed_out_of_window: int
    leaked: dict[str, int]
    steps: int
    wall_s: float
    host_hit_tokens: int = 0  # part of hit_tokens loaded back from the host tier


class EngineMetrics(ReplayMetrics):
    """The replayer's metrics, plus each request's outputs and the peaks that show the
    cache's hard paths ran: SWA tombstones, Mamba states evicted from nodes that stay, SWA
    slots freed early by running requests."""

    def __init__(self, cache: UnifiedRadixCache, specs: list[RequestSpec]) -> None:
        super().__init__(cache, len(specs), progress=False)
        self.specs = specs
        self.outputs: dict[int, list[int]] = {}
        types = [c.component_type for c in cache.components]
        self._swa = types.index(ComponentType.SWA) if ComponentType.SWA in types else None
        self._mamba = types.index(ComponentType.MAMBA) if ComponentType.MAMBA in types else None
        self._mamba_holders: set[int] = set()
        self.swa_tombstones = self.mamba_tombstones = self.swa_freed_out_of_window = 0

    def on_finish(self, request: RunningRequest) -> None:
        super().on_finish(request)
        prompt_len = len(request.spec.prompt)
        self.outputs[request.spec.rid] = list(request.req.token_ids[prompt_len:])

    def on_step(self, scheduler: SchedulerView) -> None:
        super().on_step(scheduler)
        swa = mamba = 0
        for node in self.cache.tree.nodes():
            if self._swa is not None and node.data[self._swa].value is None:
                swa += 1
            if self._mamba is not None:
                if node.data[self._mamba].value is not None:
                    self._mamba_holders.add(node.id)
                elif node.id in self._mamba_holders:
                    mamba += 1
        freed = sum(
            max(0, r.req.swa_evicted_seqlen - r.req.cache_protected_len) for r in scheduler.running
        )
        self.swa_tombstones = max(self.swa_tombstones, swa)
        self.mamba_tombstones = max(self.mamba_tombstones, mamba)
        self.swa_freed_out_of_window = max(self.swa_freed_out_of_window, freed)


class Engine:
    def __init__(self, model: TinyHybridModel, config: EngineConfig | None = None) -> None:
        self.model = model
        self.config = config or EngineConfig()
        self.cache = build_engine_cache(model, self.config)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        session_ids: Sequence[str | None] | None = None,
    ) -> GenerateResult:
        """Greedy generation of `max_new_tokens` (>= 1) tokens after each prompt.
        `session_ids[i]` (with `enable_session_cache`) keeps prompt `i`'s context covered
        for its session's next turn, in a later `generate` call.

        Raises ValueError for an empty prompt, a token outside the vocabulary, or a request
        that cannot fit the full pool or `max_context_len` even alone."""
        specs = self._specs(prompts, max_new_tokens)
        if session_ids is not None:
            if len(session_ids) != len(specs):
                raise ValueError(f"{len(session_ids)} session ids for {len(specs)} prompts")
            specs = [replace(s, session_id=sid) for s, sid in zip(specs, session_ids, strict=True)]
        runner = PoolRunner(self.model, self.cache)
        metrics = EngineMetrics(self.cache, specs)
        scheduler = Scheduler(self.cache, runner, specs, self.config.scheduler, metrics)
        t0 = time.perf_counter()
        scheduler.run()
        self.cache.host_tier.drain()
        if self.cache.host_tier.storage is not None:
            self.cache.host_tier.storage.flush()  # what this call wrote is in L3 now
        wall_s = time.perf_counter() - t0
        scheduler.check_invariants()
        return GenerateResult(
            tokens=[metrics.outputs[s.rid] for s in specs],
            logits=[
                torch.stack([runner.logits[s.rid][i] for i in range(max_new_tokens)]) for s in specs
            ],
            prompt_tokens=metrics.prompt_tokens,
            hit_tokens=metrics.hit_tokens,
            hit_lengths=metrics.hit_lengths,
            evicted_tokens=dict(metrics.evicted),
            retractions=metrics.retractions,
            recomputed_tokens=metrics.recomputed_tokens,
            swa_tombstones=metrics.swa_tombstones,
            mamba_tombstones=metrics.mamba_tombstones,
            swa_freed_out_of_window=metrics.swa_freed_out_of_window,
            leaked=metrics.leaked(),
            steps=scheduler.num_steps,
            wall_s=wall_s,
            host_hit_tokens=metrics.host_hit_tokens,
        )

    def _specs(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[RequestSpec]:
        if not prompts:
            raise ValueError("generate needs at least one prompt")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        ps, vocab = self.config.pools.page_size, self.model.config.vocab_size
        limit = min(self.cache.pools.kv_allocator.capacity, self.config.max_context_len)
        specs = []
        for i, prompt in enumerate(prompts):
            ids = np.asarray(prompt, dtype=np.int64)
            if ids.ndim != 1 or ids.size == 0:
                raise ValueError(f"prompt {i} must be a non-empty list of token ids")
            if ids.min() < 0 or ids.max() >= vocab:
                raise ValueError(f"prompt {i} has a token id outside [0, {vocab})")
            need = -(-(ids.size + max_new_tokens) // ps) * ps
            if need > limit:
                raise ValueError(
                    f"prompt {i}: {ids.size} + {max_new_tokens} tokens need {need} slots, "
                    f"more than the full pool or max_context_len allows ({limit})"
                )
            specs.append(RequestSpec.for_generation(i, TokenPrompt(ids), max_new_tokens))
        return specs


def build_engine_cache(model: TinyHybridModel, config: EngineConfig) -> UnifiedRadixCache:
    """The cache for `model`'s layers, its pools on the model's device and dtype."""
    m = model.config
    swa, mamba = bool(m.swa_layer_ids), bool(m.mamba_layer_ids)
    pools = config.pools
    if pools.swa_tokens is not None and not swa:
        raise ValueError(f"swa_tokens={pools.swa_tokens} but the model has no SWA layer")
    if pools.mamba_slots is not None and not mamba:
        raise ValueError(f"mamba_slots={pools.mamba_slots} but the model has no Mamba layer")
    max_running = config.scheduler.max_running
    return build_cache(
        CacheConfig.embedded_in(
            config,
            pools=replace(
                pools,
                device=str(model.device),
                sliding_window=m.sliding_window if swa else None,
                mamba_slots=(pools.mamba_slots or 4 * max_running) if mamba else None,
                mamba_extra_buffer=mamba and pools.page_size > 1,
            ),
            requests=Requests(max_running, config.max_context_len),
            tensors=Tensors(
                num_full_layers=len(m.full_layer_ids),
                num_swa_layers=len(m.swa_layer_ids),
                num_kv_heads=m.num_kv_heads,
                head_dim=m.head_dim,
                kv_dtype=m.dtype,
                num_mamba_layers=len(m.mamba_layer_ids),
                mamba_conv_shape=m.conv_state_shape,
                mamba_temporal_shape=m.ssm_state_shape,
                mamba_dtype=m.dtype,
            ),
        )
    )


@dataclass(frozen=True)
class Verification:
    """`mismatches` lists the prompts whose tokens differ from the no-cache run;
    `max_abs_logit_diff` is over every generated position of every prompt."""

    reference_tokens: list[list[int]]
    mismatches: list[int]
    max_abs_logit_diff: float


def verify(
    model: TinyHybridModel, prompts: Sequence[Sequence[int]], result: GenerateResult
) -> Verification:
    """Reruns each prompt with no cache and compares with `result`."""
    reference, mismatches, diff = [], [], 0.0
    for i, prompt in enumerate(prompts):
        tokens, logits = reference_generate(model, list(prompt), len(result.tokens[i]))
        reference.append(tokens)
        if tokens != result.tokens[i]:
            mismatches.append(i)
        diff = max(diff, float((logits.cpu() - result.logits[i]).abs().max()))
    return Verification(reference, mismatches, diff)
