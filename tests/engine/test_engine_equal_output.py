"""The engine's proof of correctness: generation through the cache (prefix hits, evictions,
SWA and Mamba tombstones, retraction, chunked prefill) equals generation with no cache.

Pools are sized so every hard path runs; each test asserts that it did, so none passes
vacuously. The model runs in float64, so a greedy tie cannot flip a token and logits agree
to rounding."""

from __future__ import annotations

import dataclasses
from unittest import mock

import pytest
import torch

from benchmarks.studies.retired_orders import (
    BRANCH_AWARE,
    FLOP_AWARE,
    GREEDY_DUAL,
    GREEDY_DUAL_WINDOW,
    SWA_REUSE_AWARE,
)
from tests.engine.tiny import TINY
from uniradix.components.mamba import MambaComponent
from uniradix.engine import TinyHybridModel
from uniradix.engine.engine import Engine, EngineConfig, GenerateResult, verify
from uniradix.engine.run import CONFIG_PATTERNS, generated_prompts
from uniradix.types import ComponentType

MODEL = TINY
MAX_NEW_TOKENS = 7  # > WINDOW + 1: decoding frees SWA slots that left the window


def model_for(config: str, device: str = "cpu", **changes: object) -> TinyHybridModel:
    pattern = CONFIG_PATTERNS[config]
    return TinyHybridModel(dataclasses.replace(MODEL, layer_pattern=pattern, **changes), device)  # type: ignore[arg-type]


def shared_prompts() -> list[list[int]]:
    """Ten prompts on one 12-token prefix, branching again in pairs; then one that extends
    a prompt's first 20 tokens, and an exact repeat."""
    prompts = generated_prompts(10, 28, 12, MODEL.vocab_size, seed=3)
    return [*prompts, prompts[0][:20] + [5, 6, 7], list(prompts[3])]


def engine_config(config: str, page_size: int, **changes: object) -> EngineConfig:
    slots_per_req = 3 if page_size > 1 else 1
    base = EngineConfig.of(
        page_size=page_size,
        chunk_size=8,
        full_tokens=96,
        swa_tokens=48 if "swa" in config or config == "hybrid" else None,
        mamba_slots=4 * slots_per_req + 3 if config in ("mamba", "hybrid") else None,
        max_running=4,
        max_context_len=40,
        check_invariants=True,
    )
    return base.updated(**changes)


def assert_equal_to_no_cache(
    model: TinyHybridModel, prompts: list[list[int]], result: GenerateResult
) -> float:
    check = verify(model, prompts, result)
    assert result.tokens == check.reference_tokens
    assert check.mismatches == []
    assert check.max_abs_logit_diff < 1e-6
    assert all(n == 0 for n in result.leaked.values()), result.leaked
    return check.max_abs_logit_diff


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("config", sorted(CONFIG_PATTERNS))
def test_generation_through_the_cache_equals_no_cache(
    config: str, page_size: int, device: str
) -> None:
    model = model_for(config, device)
    prompts = shared_prompts()
    result = Engine(model, engine_config(config, page_size)).generate(prompts, MAX_NEW_TOKENS)
    assert_equal_to_no_cache(model, prompts, result)
    assert all(len(t) == MAX_NEW_TOKENS for t in result.tokens)
    assert result.hit_tokens > 0
    assert result.evicted_tokens["full"] > 0
    if "S" in model.config.layer_pattern:
        assert result.swa_tombstones > 0
        assert result.evicted_tokens["swa"] > 0
        assert result.swa_freed_out_of_window > 0
    if "M" in model.config.layer_pattern:
        assert result.mamba_tombstones > 0


@pytest.mark.parametrize("config", ["full", "hybrid"])
def test_retracted_requests_generate_the_same(config: str, device: str) -> None:
    """No decode reserve and a pool for about two requests: decoding runs out of memory and
    retracts requests, which later re-prefill their prompt and outputs so far."""
    model = model_for(config, device)
    prompts = shared_prompts()[:6]
    engine_cfg = engine_config(config, 1, full_tokens=64, decode_reserve_ratio=0.0)
    result = Engine(model, engine_cfg).generate(prompts, 12)
    assert result.retractions > 0 and result.recomputed_tokens > 0
    assert_equal_to_no_cache(model, prompts, result)


def test_chunks_smaller_than_a_window_and_one_token_chunks(device: str) -> None:
    """Page 1 without extra buffer checkpoints a Mamba state after every chunk: enough slots
    that the states of the shared prefix survive until the next request."""
    model = model_for("hybrid", device)
    prompts = shared_prompts()[:4]
    for chunk_size in (1, 3):
        config = engine_config("hybrid", 1, chunk_size=chunk_size, mamba_slots=40)
        engine = Engine(model, config)
        result = engine.generate(prompts, MAX_NEW_TOKENS)
        assert result.hit_tokens > 0
        assert_equal_to_no_cache(model, prompts, result)


@pytest.mark.parametrize("placement", [False, True])
def test_the_cache_persists_across_generate_calls(device: str, placement: bool) -> None:
    model = model_for("hybrid", device)
    prompts = shared_prompts()[:3]
    config = engine_config("hybrid", 4, full_tokens=256, swa_tokens=256, mamba_slots=40)
    engine = Engine(model, config.updated(checkpoint_placement=placement))
    first = engine.generate(prompts, MAX_NEW_TOKENS)
    again = engine.generate(prompts, MAX_NEW_TOKENS)
    assert again.tokens == first.tokens
    # Page 4, chunks of 8. Prompt 1 shares 20 tokens with prompt 0 but resumes from prompt
    # 0's last state below that (16, a chunk end), then checkpoints the branch at 20; prompt
    # 2 shares 12 and resumes from the state at 8.
    assert first.hit_lengths == [0, 16, 8]
    # Repeats match all but the last token, page aligned (24), down to the last state: prompt
    # 0 checkpointed at its chunk ends 8, 16, 24; prompts 1 and 2 at 20 and 28. With
    # checkpoint placement every prompt also leaves a state at its length minus one, floored
    # to the page (24), where a resend matches.
    assert again.hit_lengths == ([24, 24, 24] if placement else [24, 20, 20])
    assert_equal_to_no_cache(model, prompts, again)


def test_a_mamba_checkpoint_lands_where_a_branch_starts() -> None:
    """One request at a time, page 1, chunks of 8. Request 0 publishes states at 8, 16, 24
    and its end; request 1 shares 12 tokens: the full KV matches 12 but the last state is at
    8, so it resumes there and its first chunk stops at 12 to checkpoint the branch point;
    request 2, on the same 12 tokens, then resumes at 12."""
    model = model_for("mamba")
    base = generated_prompts(1, 28, 0, MODEL.vocab_size, seed=5)[0]
    prompts = [base, base[:12] + [1] * 10, base[:12] + [2] * 10]
    # Slots for every state (no eviction): this is about placement, not eviction order.
    cfg = engine_config("mamba", 1, full_tokens=256, max_running=1, mamba_slots=16)
    result = Engine(model, cfg).generate(prompts, 3)
    assert result.hit_lengths == [0, 8, 12]
    assert_equal_to_no_cache(model, prompts, result)


def test_float32_pools_follow_the_model_dtype() -> None:
    model = model_for("hybrid", dtype=torch.float32)
    engine = Engine(model, engine_config("hybrid", 1))
    assert engine.cache.pools.kv_pool is not None
    assert engine.cache.pools.kv_pool.k_buffers[0].dtype == torch.float32
    prompts = shared_prompts()[:4]
    result = engine.generate(prompts, 4)
    check = verify(model, prompts, result)
    assert result.hit_tokens > 0
    assert check.max_abs_logit_diff < 1e-4


@pytest.mark.parametrize("policy", [BRANCH_AWARE, FLOP_AWARE, "reuse_credit"])
@pytest.mark.parametrize("placement", [False, True])
@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("config", ["swa", "mamba", "hybrid"])
def test_branch_aware_eviction_and_checkpoint_placement_generate_the_same(
    config: str, page_size: int, placement: bool, policy: str, device: str
) -> None:
    """The branch-aware, flop-aware and reuse-aware eviction orders of SWA windows and Mamba
    states, with and without checkpoint placement (a grid of 8 here, so chunks are cut at grid
    points): identical tokens, and the hard paths (evictions, tombstones) still run."""
    model = model_for(config, device)
    prompts = shared_prompts()
    cfg = engine_config(
        config,
        page_size,
        aux_eviction_policy=policy,
        # the retired `branch_aware` ordered SWA windows too
        swa_eviction_policy=policy if policy == BRANCH_AWARE else "reuse_credit",
        checkpoint_placement=placement,
        checkpoint_grid=8,
    )
    result = Engine(model, cfg).generate(prompts, MAX_NEW_TOKENS)
    assert_equal_to_no_cache(model, prompts, result)
    assert result.hit_tokens > 0
    assert result.evicted_tokens["full"] > 0
    if "S" in model.config.layer_pattern:
        assert result.evicted_tokens["swa"] > 0
    if "M" in model.config.layer_pattern:
        assert result.mamba_tombstones > 0


@pytest.mark.parametrize(
    "swa_policy", [SWA_REUSE_AWARE, GREEDY_DUAL, GREEDY_DUAL_WINDOW, "reuse_credit"]
)
@pytest.mark.parametrize("aux_policy", [FLOP_AWARE, "reuse_credit"])
@pytest.mark.parametrize("placement", [False, True])
@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("config", ["swa", "hybrid"])
def test_reuse_aware_swa_order_generates_the_same(
    config: str, page_size: int, placement: bool, aux_policy: str, swa_policy: str, device: str
) -> None:
    """The reuse-aware and greedy-dual eviction orders of SWA windows: identical tokens, SWA
    windows evicted."""
    model = model_for(config, device)
    prompts = shared_prompts()
    cfg = engine_config(
        config,
        page_size,
        aux_eviction_policy=aux_policy,
        swa_eviction_policy=swa_policy,
        checkpoint_placement=placement,
        checkpoint_grid=8,
    )
    result = Engine(model, cfg).generate(prompts, MAX_NEW_TOKENS)
    assert_equal_to_no_cache(model, prompts, result)
    assert result.hit_tokens > 0
    assert result.evicted_tokens["swa"] > 0


@pytest.mark.parametrize("config", ["mamba", "hybrid"])
def test_untracked_decode_outputs_generate_the_same(config: str, device: str) -> None:
    """Decode outputs judged from the first finish state on, every other request sampling
    (`uniradix.sim.placement`): no match resumes from a finish state here, so odd requests
    leave none, and the tokens are still those of no cache."""
    model = model_for(config, device)
    prompts = shared_prompts()
    cfg = engine_config(config, 4, checkpoint_grid=8)
    engine = Engine(model, cfg)
    with mock.patch.multiple("uniradix.sim.placement", OUTPUT_WARMUP=0, OUTPUT_SAMPLE=2):
        result = engine.generate(prompts, MAX_NEW_TOKENS)
    assert_equal_to_no_cache(model, prompts, result)
    mamba = engine.cache.component(ComponentType.MAMBA)
    assert isinstance(mamba, MambaComponent)
    counts = mamba.reuse_counts
    assert counts.finish_resumed == 0 and 0 < counts.finish_stored < len(prompts)
    assert result.hit_tokens > 0 and result.mamba_tombstones > 0
