"""Attention mixer of the tiny model: grouped-query attention with RoPE, full or sliding-window.

Projections and RoPE work on any batch of rows (one row per token, each with its own absolute
position); `attend` handles the new tokens of one request against its stored K/V.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from uniradix.engine.state import RequestState


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotates `x` `[n, heads, d]` by its absolute `positions` `[n]` (rotate-half layout).

    Angles are computed in float64 so a token's rotation does not depend on its chunk.
    """
    half = x.shape[-1] // 2
    inv_freq = theta ** (
        -torch.arange(half, dtype=torch.float64, device=x.device) * 2 / x.shape[-1]
    )
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos = angles.cos().to(x.dtype)[:, None, :]
    sin = angles.sin().to(x.dtype)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class AttentionMixer(nn.Module):
    """`sliding_window=None` is full attention; an int `W` limits each query to `W` keys."""

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        rope_theta: float,
        sliding_window: int | None,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.rope_theta = rope_theta
        self.sliding_window = sliding_window
        self.q_weight = nn.Parameter(torch.empty(num_heads * head_dim, hidden_size))
        self.k_weight = nn.Parameter(torch.empty(num_kv_heads * head_dim, hidden_size))
        self.v_weight = nn.Parameter(torch.empty(num_kv_heads * head_dim, hidden_size))
        self.o_weight = nn.Parameter(torch.empty(hidden_size, num_heads * head_dim))

    def project(
        self, x: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q `[n, H, d]`, k and v `[n, H_kv, d]` for rows `x` `[n, hidden]`, RoPE applied."""
        n = x.shape[0]
        q = (x @ self.q_weight.T).view(n, self.num_heads, self.head_dim)
        k = (x @ self.k_weight.T).view(n, self.num_kv_heads, self.head_dim)
        v = (x @ self.v_weight.T).view(n, self.num_kv_heads, self.head_dim)
        return (
            apply_rope(q, positions, self.rope_theta),
            apply_rope(k, positions, self.rope_theta),
            v,
        )

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        start_pos: int,
        store: RequestState,
        layer_id: int,
    ) -> torch.Tensor:
        """Writes the new K/V of one request, attends over its stored K/V; `[n, H * d]`."""
        n = q.shape[0]
        end_pos = start_pos + n
        positions = torch.arange(start_pos, end_pos, device=q.device)
        if self.sliding_window is None:
            first_pos = 0
            store.write_full_kv(layer_id, positions, k, v)
            keys, values = store.read_full_kv(layer_id, end_pos)
        else:
            first_pos = max(0, start_pos - self.sliding_window + 1)
            store.write_swa_kv(layer_id, positions, k, v)
            keys, values = store.read_swa_kv(layer_id, first_pos, end_pos)
        expected = (end_pos - first_pos, self.num_kv_heads, self.head_dim)
        if tuple(keys.shape) != expected or tuple(values.shape) != expected:
            raise ValueError(
                f"layer {layer_id}: store returned K {tuple(keys.shape)} and V "
                f"{tuple(values.shape)} for positions [{first_pos}, {end_pos}), "
                f"expected {expected}"
            )
        key_pos = torch.arange(first_pos, end_pos, device=q.device)
        allowed = key_pos[None, :] <= positions[:, None]
        if self.sliding_window is not None:
            allowed &= key_pos[None, :] > positions[:, None] - self.sliding_window
        group = self.num_heads // self.num_kv_heads
        keys = keys.repeat_interleave(group, dim=1)
        values = values.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, keys) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~allowed[None], float("-inf"))
        out = torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), values)
        return out.reshape(n, self.num_heads * self.head_dim)

    def output(self, attended: torch.Tensor) -> torch.Tensor:
        return attended @ self.o_weight.T
