"""DenseRequestState (the reference store) and greedy reference generation."""

from __future__ import annotations

import pytest
import torch

from uniradix.engine import DenseRequestState, ModelConfig, TinyHybridModel, reference_generate

CONFIG = ModelConfig(
    hidden_size=32,
    layer_pattern="FSM",
    head_dim=8,
    intermediate_size=64,
    sliding_window=3,
    d_state=4,
    dtype=torch.float64,
)


def kv(n: int, value: float) -> torch.Tensor:
    return torch.full((n, 2, 8), value)


def test_writes_append_and_reads_return_exact_ranges() -> None:
    store = DenseRequestState()
    store.write_swa_kv(1, torch.arange(0, 3), kv(3, 1.0), kv(3, -1.0))
    store.write_swa_kv(1, torch.arange(3, 5), kv(2, 2.0), kv(2, -2.0))
    k, v = store.read_swa_kv(1, 2, 5)
    assert k[:, 0, 0].tolist() == [1.0, 2.0, 2.0]
    assert v[:, 0, 0].tolist() == [-1.0, -2.0, -2.0]
    store.write_full_kv(0, torch.arange(0, 2), kv(2, 5.0), kv(2, 6.0))
    assert store.read_full_kv(0, 2)[0].shape == (2, 2, 8)


def test_gaps_repeats_and_reads_past_the_end_raise() -> None:
    store = DenseRequestState()
    store.write_full_kv(0, torch.arange(0, 2), kv(2, 0.0), kv(2, 0.0))
    with pytest.raises(ValueError, match="append at position 2"):
        store.write_full_kv(0, torch.arange(3, 4), kv(1, 0.0), kv(1, 0.0))
    with pytest.raises(ValueError, match="append at position 2"):
        store.write_full_kv(0, torch.arange(1, 3), kv(2, 0.0), kv(2, 0.0))
    with pytest.raises(ValueError, match=r"\[0, 3\) but only \[0, 2\)"):
        store.read_full_kv(0, 3)
    with pytest.raises(ValueError, match="no Mamba state"):
        store.read_mamba_state(2)


def test_copy_is_independent() -> None:
    store = DenseRequestState()
    store.write_full_kv(0, torch.arange(0, 1), kv(1, 1.0), kv(1, 1.0))
    store.write_mamba_state(2, torch.zeros(4, 3), torch.ones(4, 4))
    other = store.copy()
    other.write_full_kv(0, torch.arange(1, 2), kv(1, 2.0), kv(1, 2.0))
    other.mamba[2][1].add_(1.0)
    assert store.read_full_kv(0, 1)[0].shape[0] == 1
    with pytest.raises(ValueError):
        store.read_full_kv(0, 2)
    assert torch.equal(store.read_mamba_state(2)[1], torch.ones(4, 4))


def test_reference_generate_is_the_same_for_every_chunk_size() -> None:
    model = TinyHybridModel(CONFIG)
    prompt = [5, 77, 300, 12, 12, 8, 499, 1, 64, 250, 3]
    tokens, logits = reference_generate(model, prompt, 6)
    assert len(tokens) == 6 and logits.shape == (6, CONFIG.vocab_size)
    assert tokens == logits.argmax(dim=-1).tolist()
    assert len(set(tokens)) > 1  # an untied head does not just echo the last token
    for chunk_size in (1, 4):
        chunked_tokens, chunked_logits = reference_generate(model, prompt, 6, chunk_size)
        assert chunked_tokens == tokens
        assert (chunked_logits - logits).abs().max() < 1e-6
    # Generation is prefill of the prompt plus the generated tokens, one at a time.
    full = torch.tensor(prompt + tokens[:-1])
    rows = model.forward(full, 0, DenseRequestState())[len(prompt) - 1 :]
    assert (rows - logits).abs().max() < 1e-6


def test_reference_generate_edge_cases() -> None:
    model = TinyHybridModel(CONFIG)
    tokens, logits = reference_generate(model, torch.tensor([4]), 0)
    assert tokens == [] and logits.shape == (0, CONFIG.vocab_size)
    with pytest.raises(ValueError, match="non-empty"):
        reference_generate(model, [], 2)
    with pytest.raises(ValueError, match="chunk_size"):
        reference_generate(model, [1, 2], 2, chunk_size=0)
