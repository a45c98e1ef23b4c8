"""The engine's parts: pool layout checks, the pool store refusing padding slots, the runner's
split at a Mamba track position, and the engine's input validation."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from uniradix import CacheConfig, InvariantError, MatchPrefixParams, Req, build_cache
from uniradix.engine import DenseRequestState, ModelConfig, TinyHybridModel
from uniradix.engine.engine import Engine, EngineConfig, build_engine_cache
from uniradix.engine.pool_state import PoolLayout
from uniradix.engine.runner import PoolRunner
from uniradix.sim.batch import ForwardBatch, ForwardEntry, RunningRequest
from uniradix.sim.request_spec import RequestSpec, TokenPrompt

MODEL = ModelConfig(
    hidden_size=32,
    layer_pattern="FSM",
    head_dim=8,
    intermediate_size=64,
    sliding_window=4,
    d_state=4,
    d_conv=3,
    dtype=torch.float64,
)
TOKENS = [9, 4, 300, 17, 17, 250, 3, 88, 1, 42, 500]


def admitted(engine: Engine, tokens: list[int]) -> RunningRequest:
    """A request admitted by hand: a row, its Mamba slots, slots for every position."""
    cache = engine.cache
    row = cache.pools.req_to_token_pool.alloc()
    assert row is not None
    req = Req(token_ids=list(tokens), req_pool_idx=row)
    cache.match_prefix(MatchPrefixParams(cache.make_key(tokens), req=req))
    ps = cache.page_size
    n = -(-len(tokens) // ps) * ps
    slots = cache.pools.kv_allocator.alloc(n)
    assert slots is not None
    cache.pools.req_to_token_pool.write(row, 0, slots)
    req.kv_allocated_len = n
    spec = RequestSpec.for_generation(0, TokenPrompt(tokens), 1)
    return RunningRequest(spec, req, len(tokens))


def test_the_layout_must_match_the_model() -> None:
    model = TinyHybridModel(MODEL)
    full_only = build_cache(CacheConfig.of(full_tokens=32, num_full_layers=1))
    with pytest.raises(ValueError, match=r"KV pool rows are \(1, 1\) torch.float32"):
        PoolLayout(model.config, full_only.pools)
    full_only = build_cache(
        CacheConfig.of(
            full_tokens=32, num_full_layers=1, num_kv_heads=2, head_dim=8, kv_dtype=torch.float64
        )
    )
    with pytest.raises(ValueError, match="no SWA pool"):
        PoolLayout(model.config, full_only.pools)
    engine_cache = build_engine_cache(model, EngineConfig.of(full_tokens=32, max_context_len=32))
    PoolLayout(model.config, engine_cache.pools)
    single = TinyHybridModel(dataclasses.replace(MODEL, dtype=torch.float32))
    with pytest.raises(ValueError, match="float64"):
        PoolLayout(single.config, engine_cache.pools)
    no_mamba = TinyHybridModel(dataclasses.replace(MODEL, layer_pattern="FS"))
    with pytest.raises(ValueError, match="mamba_slots=4 but the model has no Mamba"):
        build_engine_cache(no_mamba, EngineConfig.of(mamba_slots=4))
    with pytest.raises(ValueError, match="swa_tokens=8 but the model has no SWA"):
        build_engine_cache(
            TinyHybridModel(dataclasses.replace(MODEL, layer_pattern="F")),
            EngineConfig.of(swa_tokens=8),
        )


def test_a_freed_swa_peer_is_never_read() -> None:
    model = TinyHybridModel(MODEL)
    engine = Engine(model, EngineConfig.of(full_tokens=32, max_context_len=32))
    request = admitted(engine, TOKENS)
    store = PoolLayout(model.config, engine.cache.pools).state(request.req)
    model.forward(torch.tensor(TOKENS), 0, store)
    row = engine.cache.pools.req_to_token_pool.read(request.req.req_pool_idx or 0, 0, 2)
    engine.cache.pools.kv_allocator.free_swa(row)  # type: ignore[union-attr]
    with pytest.raises(InvariantError, match="padding page"):
        store.read_swa_kv(1, 0, 4)
    store.read_swa_kv(1, 2, 4)
    with pytest.raises(InvariantError, match="padding page"):
        store.read_full_kv(0, len(TOKENS) + 2)  # positions past the allocation


@pytest.mark.parametrize("split", [4, 8])
def test_the_runner_tracks_the_mamba_state_at_the_track_position(split: int) -> None:
    """Page 4 (extra buffer): a prefill entry over [0, 11) tracking 8 (or a shorter one
    ending at 8) leaves the state after 8 tokens in the track slot, equal to the dense one."""
    model = TinyHybridModel(MODEL)
    engine = Engine(model, EngineConfig.of(page_size=4, full_tokens=32, max_context_len=32))
    request = admitted(engine, TOKENS)
    runner = PoolRunner(model, engine.cache)
    end = 11 if split == 8 else 8
    (token,) = runner.forward(ForwardBatch(False, [ForwardEntry(request, 0, end, True, 8)]))
    dense = DenseRequestState()
    logits = model.forward(torch.tensor(TOKENS[:8]), 0, dense)
    states = engine.cache.pools.mamba.states  # type: ignore[union-attr]
    track = engine.cache.mamba_requests.track_slot(request.req)  # type: ignore[attr-defined]
    conv, ssm = dense.read_mamba_state(2)
    assert (states.conv_states[0, track] - conv).abs().max() < 1e-12
    assert (states.temporal_states[0, track] - ssm).abs().max() < 1e-12
    if end == 8:
        assert token == int(logits[-1].argmax())
    assert runner.num_forward_tokens == end
    assert set(runner.logits) == {0} and set(runner.logits[0]) == {0}


def test_decode_entries_must_run_the_last_token() -> None:
    model = TinyHybridModel(MODEL)
    engine = Engine(model, EngineConfig.of(full_tokens=32, max_context_len=32))
    request = admitted(engine, TOKENS)
    runner = PoolRunner(model, engine.cache)
    with pytest.raises(ValueError, match="last token"):
        runner.forward(ForwardBatch(True, [ForwardEntry(request, 3, 4, True)]))


@pytest.mark.parametrize(
    ("prompts", "max_new_tokens", "message"),
    [
        ([], 2, "at least one prompt"),
        ([[1, 2]], 0, "max_new_tokens must be >= 1"),
        ([[]], 2, "prompt 0 must be a non-empty"),
        ([[1], [2, 512]], 2, "prompt 1 has a token id outside"),
        ([[1], [-1]], 2, "prompt 1 has a token id outside"),
        ([[1] * 30], 4, "prompt 0: 30 \\+ 4 tokens need 36 slots"),
    ],
)
def test_bad_generate_calls_raise(
    prompts: list[list[int]], max_new_tokens: int, message: str
) -> None:
    engine = Engine(TinyHybridModel(MODEL), EngineConfig.of(page_size=4, full_tokens=32))
    with pytest.raises(ValueError, match=message):
        engine.generate(prompts, max_new_tokens)
    pools = engine.cache.pools
    assert pools.available() == pools.capacities()  # nothing was admitted
