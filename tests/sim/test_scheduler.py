"""The scheduler through the replayer: exact hits, hit == ideal without eviction, invariants
after every step and no leak under pressure, retraction, and what the runner is handed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.sim.specs import spec, specs_from
from uniradix import CacheConfig, build_cache
from uniradix.sim.batch import ForwardBatch
from uniradix.sim.ideal import ideal_hits
from uniradix.sim.replay import (
    CONFIG_COMPONENTS,
    NullRunner,
    ReplayOptions,
    admissible,
    run_replay,
)
from uniradix.sim.request_spec import RequestSpec
from uniradix.sim.scheduler import Scheduler, SchedulerConfig, SchedulerStalled
from uniradix.sim.workloads import WORKLOADS

EXISTING_CONFIGS = sorted(CONFIG_COMPONENTS)
SMALL = {
    "shared_prefix": dict(max_requests=40),
    "multi_turn": dict(max_requests=48),
    "agentic": dict(max_requests=40),
    "agentic_interfered": dict(max_requests=40),
    "long_doc_qa": dict(max_requests=12),
    "random": dict(max_requests=24),
}


class RecordingRunner(NullRunner):
    """Checks that every position it computes has an allocated slot, unique in the batch."""

    def __init__(self, scheduler_cache: object) -> None:
        self.cache = scheduler_cache
        self.batches: list[ForwardBatch] = []
        self.sampled: dict[int, list[int]] = {}

    def forward(self, batch: ForwardBatch) -> list[int]:
        pools = self.cache.pools  # type: ignore[attr-defined]
        slots = []
        for e in batch.entries:
            req = e.request.req
            assert 0 <= e.start < e.end <= req.kv_allocated_len
            slots.append(pools.req_to_token_pool.read(req.req_pool_idx, e.start, e.end))
        new = torch.cat(slots)
        assert pools.kv_allocator.is_allocated(new).all()
        assert new.unique().shape[0] == new.shape[0]
        self.batches.append(batch)
        for e in batch.entries:
            if e.samples:
                self.sampled.setdefault(e.request.spec.rid, []).append(e.request.num_output)
        return super().forward(batch)


def _replay(specs: list[RequestSpec], page_size: int = 1, full_tokens: int = 4096, **kw: object):  # type: ignore[no-untyped-def]
    cache = build_cache(
        CacheConfig.of(full_tokens=full_tokens, page_size=page_size, max_context_len=512)
    )
    runner = RecordingRunner(cache)
    hits: list[int] = []

    class Listener:
        def on_admit(self, request, match):  # type: ignore[no-untyped-def]
            hits.append(match.device_prefix_len)

        def on_match(self, rid, key, match): ...  # type: ignore[no-untyped-def]
        def on_evict(self, result): ...  # type: ignore[no-untyped-def]
        def on_retract(self, request): ...  # type: ignore[no-untyped-def]
        def on_finish(self, request): ...  # type: ignore[no-untyped-def]
        def on_step(self, scheduler): ...  # type: ignore[no-untyped-def]

    config = SchedulerConfig(check_invariants=True, **kw)  # type: ignore[arg-type]
    scheduler = Scheduler(cache, runner, specs, config, Listener())
    scheduler.run()
    return scheduler, runner, hits


def test_exact_hits_chunks_and_outputs_page_4() -> None:
    a = list(range(1, 11))
    specs = specs_from([a, [*a[:8], 50, 51], [*a, 70, 71, 99]], [[70, 71, 72], [60], [1, 2]])
    scheduler, runner, hits = _replay(specs, page_size=4, max_running=1, chunk_size=4)
    assert hits == [0, 8, 12]
    prefill = [
        (e.request.spec.rid, e.start, e.end)
        for b in runner.batches
        if not b.is_decode
        for e in b.entries
    ]
    assert prefill == [(0, 0, 4), (0, 4, 8), (0, 8, 10), (1, 8, 10), (2, 12, 13)]
    decode = [
        (e.request.spec.rid, e.start) for b in runner.batches if b.is_decode for e in b.entries
    ]
    assert decode == [(0, 10), (0, 11), (2, 13)]
    assert scheduler.num_invariant_checks == scheduler.num_steps
    cache = scheduler.cache
    assert cache.protected_size() == 0
    assert cache.evictable_size() + cache.pools.kv_allocator.available_size() == 4096


def test_next_turn_waits_for_the_answer() -> None:
    specs = [spec(0, [1, 2, 3, 4], [5, 6, 7]), spec(1, [1, 2, 3, 4, 5, 6, 7, 8], [9], after=0)]
    _, _, hits = _replay(specs, max_running=8)
    assert hits == [0, 6]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
@pytest.mark.parametrize("page_size", [1, 4])
def test_hits_equal_ideal_without_eviction(name: str, page_size: int) -> None:
    result = run_replay(
        ReplayOptions.of(
            workload=name,
            config="full",
            page_size=page_size,
            full_tokens=1 << 20,
            max_running=1,
            chunk_size=512,
            **SMALL[name],
        )  # type: ignore[arg-type]
    )
    s = result.summary
    assert s["components"]["full"]["evicted"] == 0
    assert s["hit_tokens"] == s["ideal_hit_tokens"] > (0 if name != "random" else -1)
    assert s["leaked"] == {"full": 0, "req": 0}


@pytest.mark.parametrize("config", EXISTING_CONFIGS)
@pytest.mark.parametrize("name", sorted(WORKLOADS))
@pytest.mark.parametrize("page_size", [1, 4])
def test_small_pools_keep_invariants_and_leak_nothing(
    config: str, name: str, page_size: int
) -> None:
    long_doc = name == "long_doc_qa"
    result = run_replay(
        ReplayOptions.of(
            workload=name,
            config=config,
            page_size=page_size,
            full_tokens=9000 if long_doc else 3000,
            max_running=8,
            chunk_size=256,
            decode_reserve_ratio=0.0,
            check_invariants=True,
            **SMALL[name],
        )  # type: ignore[arg-type]
    )
    s = result.summary
    assert s["requests"] == SMALL[name]["max_requests"]
    assert s["invariant_checks"] == s["steps"] + 1
    pools = {"full", "req"} | {c for c in ("swa", "mamba") if c in config or config == "hybrid"}
    assert s["leaked"] == dict.fromkeys(pools, 0)
    for pool in pools:
        assert s["components"][pool]["peak_used"] <= s["components"][pool]["capacity"]
    assert s["hit_tokens"] <= s["prompt_tokens"]


def test_retraction_when_decode_cannot_allocate() -> None:
    rng = np.random.default_rng(0)
    specs = specs_from(
        [rng.integers(0, 1000, 40).tolist() for _ in range(6)],
        [rng.integers(0, 1000, 60).tolist() for _ in range(6)],
    )
    scheduler, runner, _ = _replay(specs, full_tokens=300, max_running=6, decode_reserve_ratio=0.0)
    # every output is sampled once, in order, across retractions and re-admissions
    assert runner.sampled == {rid: list(range(60)) for rid in range(6)}
    admissions = [e.request.spec.rid for b in runner.batches if not b.is_decode for e in b.entries]
    assert len(admissions) > 6, "expected re-admissions after retraction"
    assert scheduler.done
    result = run_replay(
        ReplayOptions.of(
            workload="random",
            config="full",
            full_tokens=4096,
            chunk_size=512,
            max_running=16,
            decode_reserve_ratio=0.0,
            check_invariants=True,
            max_requests=16,
        )
    )
    assert result.summary["retractions"] > 0
    assert result.summary["recomputed_tokens"] > 0
    assert result.summary["leaked"] == {"full": 0, "req": 0}


def test_too_long_requests_are_rejected() -> None:
    specs = [spec(0, list(range(100)), [1]), spec(1, list(range(10)), [1, 2], after=0)]
    kept = admissible(specs, capacity=64, page_size=8)
    assert [(s.rid, len(s.prompt), s.after) for s in kept] == [(0, 10, None)]
    with pytest.raises(ValueError, match="no request fits"):
        run_replay(ReplayOptions.of(workload="long_doc_qa", config="full", full_tokens=4096))


def test_bad_scheduler_config() -> None:
    cache = build_cache(CacheConfig.of(full_tokens=64, page_size=8))
    with pytest.raises(ValueError, match="chunk_size=4"):
        Scheduler(cache, NullRunner(), [], SchedulerConfig(chunk_size=4))
    with pytest.raises(ValueError, match="max_running=0"):
        SchedulerConfig(max_running=0)


@settings(max_examples=25, deadline=None)
@given(
    prompts=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=40), min_size=1, max_size=10),
    outputs=st.lists(st.integers(1, 20), min_size=10, max_size=10),
    page_size=st.sampled_from([1, 2, 4]),
    full_pages=st.integers(16, 40),
    max_running=st.integers(1, 4),
    chunk_pages=st.integers(1, 8),
)
def test_random_traffic_keeps_invariants(  # type: ignore[no-untyped-def]
    prompts, outputs, page_size, full_pages, max_running, chunk_pages
) -> None:
    specs = specs_from(prompts, [[7] * n for n in outputs[: len(prompts)]])
    specs = [
        s
        for s in specs
        if -(-(len(s.prompt) + s.output_len) // page_size) * page_size <= full_pages * page_size
    ] or specs_from([[1]], [[1]])
    specs = [
        spec(i, s.prompt.token_ids().tolist(), s.output_ids.tolist()) for i, s in enumerate(specs)
    ]
    scheduler, _, hits = _replay(
        specs,
        page_size=page_size,
        full_tokens=full_pages * page_size,
        max_running=max_running,
        chunk_size=chunk_pages * page_size,
        decode_reserve_ratio=0.0,
    )
    assert scheduler.done
    cache = scheduler.cache
    assert (
        cache.evictable_size() + cache.pools.kv_allocator.available_size()
        == cache.pools.kv_allocator.capacity
    )
    if max_running == 1 and full_pages * page_size >= sum(
        len(s.prompt) + s.output_len for s in specs
    ):
        assert hits == ideal_hits(specs, page_size)


def test_stall_is_reported() -> None:
    cache = build_cache(CacheConfig.of(full_tokens=8, max_context_len=64))
    with pytest.raises(SchedulerStalled):
        Scheduler(cache, NullRunner(), [spec(0, list(range(20)), [1])]).run()
