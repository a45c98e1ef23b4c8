"""DenseRequestState: the no-cache reference store, and greedy generation on top of it.

A plain in-memory `RequestState`: per layer, K/V tensors that grow by appending, and the
latest Mamba states. SWA K/V is kept whole (not trimmed to the window): the reference must be
obviously right, and keeping old positions lets tests perturb K/V outside the window to show
the model never reads it. Writes must append exactly at the current end, so a caller that
skips or repeats positions gets a ValueError instead of silently shifted K/V.
"""

from __future__ import annotations

import torch

from uniradix.engine.model import TinyHybridModel

KV = tuple[torch.Tensor, torch.Tensor]


def _append(
    table: dict[int, KV], layer_id: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> None:
    old = table.get(layer_id)
    num_stored = 0 if old is None else old[0].shape[0]
    n = positions.numel()
    expected = torch.arange(num_stored, num_stored + n, device=positions.device)
    if not torch.equal(positions, expected) or k.shape[0] != n or v.shape[0] != n:
        raise ValueError(
            f"layer {layer_id}: writes must append at position {num_stored}, got positions "
            f"{positions.tolist()} with {k.shape[0]} K and {v.shape[0]} V rows"
        )
    table[layer_id] = (k, v) if old is None else (torch.cat([old[0], k]), torch.cat([old[1], v]))


def _read(table: dict[int, KV], layer_id: int, start_pos: int, end_pos: int) -> KV:
    num_stored = table[layer_id][0].shape[0] if layer_id in table else 0
    if not 0 <= start_pos <= end_pos <= num_stored:
        raise ValueError(
            f"layer {layer_id}: read of positions [{start_pos}, {end_pos}) but only "
            f"[0, {num_stored}) are stored"
        )
    k, v = table[layer_id]
    return k[start_pos:end_pos], v[start_pos:end_pos]


class DenseRequestState:
    """One request's K/V and Mamba states as plain tensors (see `RequestState`)."""

    def __init__(self) -> None:
        self.full_kv: dict[int, KV] = {}
        self.swa_kv: dict[int, KV] = {}
        self.mamba: dict[int, KV] = {}

    def write_full_kv(
        self, layer_id: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        _append(self.full_kv, layer_id, positions, k, v)

    def read_full_kv(self, layer_id: int, end_pos: int) -> KV:
        return _read(self.full_kv, layer_id, 0, end_pos)

    def write_swa_kv(
        self, layer_id: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        _append(self.swa_kv, layer_id, positions, k, v)

    def read_swa_kv(self, layer_id: int, start_pos: int, end_pos: int) -> KV:
        return _read(self.swa_kv, layer_id, start_pos, end_pos)

    def read_mamba_state(self, layer_id: int) -> KV:
        if layer_id not in self.mamba:
            raise ValueError(f"layer {layer_id}: no Mamba state written yet")
        return self.mamba[layer_id]

    def write_mamba_state(
        self, layer_id: int, conv_state: torch.Tensor, ssm_state: torch.Tensor
    ) -> None:
        self.mamba[layer_id] = (conv_state, ssm_state)

    def copy(self) -> DenseRequestState:
        """An independent copy: what a prefix cache hands a request that shares a prefix."""
        other = DenseRequestState()
        for mine, theirs in (
            (self.full_kv, other.full_kv),
            (self.swa_kv, other.swa_kv),
            (self.mamba, other.mamba),
        ):
            for layer_id, (a, b) in mine.items():
                theirs[layer_id] = (a.clone(), b.clone())
        return other


def reference_generate(
    model: TinyHybridModel,
    prompt: list[int] | torch.Tensor,
    max_new_tokens: int,
    chunk_size: int | None = None,
) -> tuple[list[int], torch.Tensor]:
    """Greedy decoding with no cache: prefill `prompt` in chunks of `chunk_size` tokens (one
    chunk when None), then one token per step.

    Returns the `max_new_tokens` generated ids and the logits `[max_new_tokens, vocab]` each
    was chosen from (the last prefill row, then each decode step's row).
    """
    ids = torch.as_tensor(prompt, dtype=torch.int64)
    if ids.dim() != 1 or ids.numel() == 0:
        raise ValueError(f"prompt must be a non-empty 1-D sequence, got shape {tuple(ids.shape)}")
    if max_new_tokens < 0 or (chunk_size is not None and chunk_size < 1):
        raise ValueError(
            f"need max_new_tokens >= 0 and chunk_size >= 1, got {max_new_tokens}, {chunk_size}"
        )
    store = DenseRequestState()
    step = chunk_size or ids.numel()
    last = torch.empty(0)
    for start in range(0, ids.numel(), step):
        last = model.forward(ids[start : start + step], start, store)[-1]
    tokens: list[int] = []
    rows: list[torch.Tensor] = []
    pos = ids.numel()
    for _ in range(max_new_tokens):
        rows.append(last)
        tokens.append(int(last.argmax()))
        if len(tokens) == max_new_tokens:
            break
        last = model.forward(torch.tensor([tokens[-1]]), pos, store)[0]
        pos += 1
    vocab = model.config.vocab_size
    logits = torch.stack(rows) if rows else torch.empty(0, vocab, dtype=model.config.dtype)
    return tokens, logits
