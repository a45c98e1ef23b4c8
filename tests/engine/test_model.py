"""The tiny hybrid model against itself: chunking, resuming a copied state, batching and the
sliding window must not change what it computes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.engine.tiny import TINY, WINDOW
from uniradix.engine import DenseRequestState, ModelConfig, TinyHybridModel, reference_generate

CONFIG = TINY
PATTERNS = ["F", "S", "M", "FSM", "MSF"]
PROMPT = torch.tensor([7, 3, 500, 42, 42, 9, 0, 511, 120, 33, 64, 5, 18, 77, 301, 2, 90, 11, 6])


def model_for(pattern: str = CONFIG.layer_pattern, **changes: object) -> TinyHybridModel:
    return TinyHybridModel(dataclasses.replace(CONFIG, layer_pattern=pattern, **changes))  # type: ignore[arg-type]


def prefill(
    model: TinyHybridModel, tokens: torch.Tensor, chunk_size: int, store: DenseRequestState
) -> torch.Tensor:
    """Logits of every token, computed in chunks of `chunk_size` on top of `store`."""
    rows = [
        model.forward(tokens[start : start + chunk_size], start, store)
        for start in range(0, tokens.numel(), chunk_size)
    ]
    return torch.cat(rows)


def prefill_from(
    model: TinyHybridModel,
    tokens: torch.Tensor,
    start_pos: int,
    store: DenseRequestState,
    chunk_size: int,
) -> torch.Tensor:
    rows = [
        model.forward(tokens[i : i + chunk_size], start_pos + i, store)
        for i in range(0, tokens.numel(), chunk_size)
    ]
    return torch.cat(rows)


def test_weights_and_outputs_depend_on_the_seed_alone() -> None:
    a, b, other = model_for(), model_for(), model_for(seed=1)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb), name
    logits_a = a.forward(PROMPT, 0, DenseRequestState())
    assert torch.equal(logits_a, b.forward(PROMPT, 0, DenseRequestState()))
    assert not torch.allclose(logits_a, other.forward(PROMPT, 0, DenseRequestState()))
    single = model_for(dtype=torch.float32)
    assert torch.equal(single.embed, a.embed.to(torch.float32))
    logits_single = single.forward(PROMPT, 0, DenseRequestState())
    torch.testing.assert_close(logits_single.double(), logits_a, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_chunked_prefill_equals_one_shot(pattern: str) -> None:
    model = model_for(pattern)
    whole_store = DenseRequestState()
    whole = model.forward(PROMPT, 0, whole_store)
    assert whole.shape == (PROMPT.numel(), CONFIG.vocab_size)
    for chunk_size in (1, 3, 7):
        store = DenseRequestState()
        chunked = prefill(model, PROMPT, chunk_size, store)
        assert (chunked - whole).abs().max() < 1e-6, (pattern, chunk_size)
        for layer_id, (conv, ssm) in whole_store.mamba.items():
            assert (store.mamba[layer_id][0] - conv).abs().max() < 1e-6
            assert (store.mamba[layer_id][1] - ssm).abs().max() < 1e-6


def test_the_window_crosses_chunks_and_the_mamba_state_matters() -> None:
    """Guards the test above against passing vacuously: dropping the stored past changes
    the output of a chunk, for each layer type."""
    for pattern in ("F", "S", "M"):
        model = model_for(pattern)
        store = DenseRequestState()
        model.forward(PROMPT[:6], 0, store)
        resumed = model.forward(PROMPT[6:9], 6, store)
        amnesiac = model.forward(PROMPT[6:9], 0, DenseRequestState())
        assert (resumed - amnesiac).abs().max() > 1e-3, pattern


def test_resuming_a_copied_state_equals_computing_from_scratch() -> None:
    model = model_for()
    prefix_len = 9
    shared = DenseRequestState()
    prefill(model, PROMPT[:prefix_len], 4, shared)
    suffixes = [torch.tensor([1, 2, 3, 4, 5, 6]), torch.tensor([400, 2, 250, 8, 8])]
    for suffix in suffixes:
        branch = shared.copy()
        resumed = prefill_from(model, suffix, prefix_len, branch, chunk_size=2)
        scratch = model.forward(torch.cat([PROMPT[:prefix_len], suffix]), 0, DenseRequestState())
        assert (resumed - scratch[prefix_len:]).abs().max() < 1e-6
    # The branches wrote into their copies only.
    again = shared.copy()
    first = prefill_from(model, suffixes[0], prefix_len, again, chunk_size=6)
    scratch = model.forward(torch.cat([PROMPT[:prefix_len], suffixes[0]]), 0, DenseRequestState())
    assert (first - scratch[prefix_len:]).abs().max() < 1e-6


@pytest.mark.parametrize("bad_id", [-1, 512, 10_000])
def test_token_ids_outside_the_vocabulary_raise(bad_id: int) -> None:
    model = model_for("FSM")
    tokens = torch.tensor([1, bad_id, 2])
    with pytest.raises(ValueError, match=f"token id {bad_id} "):
        model.forward(tokens, 0, DenseRequestState())
    with pytest.raises(ValueError, match=f"token id {bad_id} "):
        model.decode(torch.tensor([3, bad_id]), [0, 0], [DenseRequestState()] * 2)
    with pytest.raises(ValueError, match=f"token id {bad_id} "):
        reference_generate(model, [bad_id], 1)


def test_bad_calls_raise() -> None:
    model = model_for("FSM")
    with pytest.raises(TypeError, match="int64"):
        model.forward(torch.tensor([1.0, 2.0]), 0, DenseRequestState())
    with pytest.raises(ValueError, match="start_pos=-1"):
        model.forward(PROMPT, -1, DenseRequestState())
    with pytest.raises(ValueError, match="3 stores"):
        model.decode(torch.tensor([1, 2]), [0, 0], [DenseRequestState()] * 3)
    with pytest.raises(ValueError, match="layer_pattern"):
        ModelConfig(layer_pattern="FXS")
    with pytest.raises(ValueError, match="num_kv_heads=3"):
        ModelConfig(num_heads=4, num_kv_heads=3)


def perturbed_decode(model: TinyHybridModel, layer_id: int, kind: str, pos: int) -> torch.Tensor:
    """Next-token logits after PROMPT, with the stored K/V of `layer_id` at `pos` changed."""
    store = DenseRequestState()
    model.forward(PROMPT, 0, store)
    table = store.swa_kv if kind == "swa" else store.full_kv
    k, v = table[layer_id]
    k, v = k.clone(), v.clone()
    k[pos] += 1.0
    v[pos] -= 1.0
    table[layer_id] = (k, v)
    return model.forward(torch.tensor([3]), PROMPT.numel(), store)


def test_sliding_window_ignores_keys_older_than_the_window() -> None:
    model = model_for("SFM")
    n = PROMPT.numel()
    store = DenseRequestState()
    model.forward(PROMPT, 0, store)
    clean = model.forward(torch.tensor([3]), n, store)
    # The query at position n attends n-W+1 .. n: position n-W is just outside.
    for pos in range(n - WINDOW + 1):
        assert torch.equal(perturbed_decode(model, 0, "swa", pos), clean), pos
    for pos in range(n - WINDOW + 1, n):
        assert not torch.allclose(perturbed_decode(model, 0, "swa", pos), clean), pos
    # A full-attention layer, in contrast, sees the oldest position.
    assert not torch.allclose(perturbed_decode(model, 1, "full", 0), clean)


class RecordingState(DenseRequestState):
    def __init__(self) -> None:
        super().__init__()
        self.swa_reads: list[tuple[int, int]] = []
        self.mamba_reads = 0

    def read_swa_kv(
        self, layer_id: int, start_pos: int, end_pos: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.swa_reads.append((start_pos, end_pos))
        return super().read_swa_kv(layer_id, start_pos, end_pos)

    def read_mamba_state(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.mamba_reads += 1
        return super().read_mamba_state(layer_id)


def test_the_model_reads_only_the_window_and_no_mamba_state_at_position_zero() -> None:
    model = model_for("SM")
    store = RecordingState()
    prefill(model, PROMPT[:12], 5, store)
    model.decode(torch.tensor([4]), [12], [store])
    assert store.swa_reads == [(0, 5), (2, 10), (7, 12), (9, 13)]
    assert store.mamba_reads == 3  # chunks at 5 and 10, and the decode; not the chunk at 0


def test_batched_decode_equals_per_request_decode() -> None:
    model = model_for()
    prompts = [PROMPT[:2], PROMPT[:11], PROMPT[3:19]]  # shorter and longer than the window
    batched_stores, single_stores = [], []
    for prompt in prompts:
        store = DenseRequestState()
        model.forward(prompt, 0, store)
        batched_stores.append(store)
        single_stores.append(store.copy())
    tokens = torch.tensor([10, 20, 30])
    positions = [p.numel() for p in prompts]
    for _ in range(3):
        batched = model.decode(tokens, positions, batched_stores)
        single = torch.cat(
            [
                model.forward(tokens[i : i + 1], positions[i], single_stores[i])
                for i in range(len(prompts))
            ]
        )
        assert (batched - single).abs().max() < 1e-12
        tokens = batched.argmax(dim=-1)
        positions = [p + 1 for p in positions]
    for a, b in zip(batched_stores, single_stores, strict=True):
        for layer_id, (conv, ssm) in a.mamba.items():
            assert (conv - b.mamba[layer_id][0]).abs().max() < 1e-12
            assert (ssm - b.mamba[layer_id][1]).abs().max() < 1e-12


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_cuda_model_is_the_cpu_model() -> None:
    cpu, cuda = model_for(), TinyHybridModel(CONFIG, device="cuda")
    assert torch.equal(cuda.embed.cpu(), cpu.embed)
    store = DenseRequestState()
    chunks = [cuda.forward(PROMPT[s : s + 5], s, store).cpu() for s in range(0, PROMPT.numel(), 5)]
    expected = cpu.forward(PROMPT, 0, DenseRequestState())
    assert (torch.cat(chunks) - expected).abs().max() < 1e-6
