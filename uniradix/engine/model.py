"""TinyHybridModel: a small but real hybrid LM (full attention, sliding-window attention,
Mamba-style layers) with seeded random weights, used as the engine's correctness oracle.

The model holds weights only. Each call runs new tokens of requests on top of their stored
state, reached through the `RequestState` protocol (see `uniradix.engine.state` for the
contracts), so outputs can be compared between a no-cache store and the cache's pools.
It is not a trained model and not fast: attention loops over requests, the scan over tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from uniradix.engine.attention import AttentionMixer
from uniradix.engine.mamba import MambaMixer
from uniradix.engine.state import RequestState

FULL, SWA, MAMBA = "F", "S", "M"


@dataclass(frozen=True)
class ModelConfig:
    """`layer_pattern` has one letter per layer: F full attention, S sliding window, M Mamba.

    The LM head is untied by default: with a tied head the residual stream keeps echoing the
    input embedding and greedy generation repeats tokens, which hides cache bugs.

    Weights depend on `seed` alone: they are drawn in float64 on the CPU and cast, so the
    float32 and float64 models are the same model up to rounding, on any device.
    """

    vocab_size: int = 512
    hidden_size: int = 64
    layer_pattern: str = "FSMFSM"
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    sliding_window: int = 8
    d_state: int = 8
    d_conv: int = 4
    mamba_expand: int = 2
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    seed: int = 0
    dtype: torch.dtype = torch.float32

    def __post_init__(self) -> None:
        if not self.layer_pattern or set(self.layer_pattern) - {FULL, SWA, MAMBA}:
            raise ValueError(
                f"layer_pattern must be a non-empty string of F/S/M, got {self.layer_pattern!r}"
            )
        sizes = {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_heads": self.num_heads,
            "num_kv_heads": self.num_kv_heads,
            "intermediate_size": self.intermediate_size,
            "sliding_window": self.sliding_window,
            "d_state": self.d_state,
            "d_conv": self.d_conv,
            "mamba_expand": self.mamba_expand,
        }
        for name, value in sizes.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.head_dim < 2 or self.head_dim % 2:
            raise ValueError(f"head_dim must be even (RoPE rotates pairs), got {self.head_dim}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}"
            )
        if not self.dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating-point dtype, got {self.dtype}")

    @property
    def num_layers(self) -> int:
        return len(self.layer_pattern)

    def _layer_ids(self, kind: str) -> list[int]:
        return [i for i, k in enumerate(self.layer_pattern) if k == kind]

    @property
    def full_layer_ids(self) -> list[int]:
        return self._layer_ids(FULL)

    @property
    def swa_layer_ids(self) -> list[int]:
        return self._layer_ids(SWA)

    @property
    def mamba_layer_ids(self) -> list[int]:
        return self._layer_ids(MAMBA)

    @property
    def mamba_inner_size(self) -> int:
        return self.mamba_expand * self.hidden_size

    @property
    def conv_state_shape(self) -> tuple[int, int]:
        return (self.mamba_inner_size, self.d_conv - 1)

    @property
    def ssm_state_shape(self) -> tuple[int, int]:
        return (self.mamba_inner_size, self.d_state)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


class GatedMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_weight = nn.Parameter(torch.empty(intermediate_size, hidden_size))
        self.up_weight = nn.Parameter(torch.empty(intermediate_size, hidden_size))
        self.down_weight = nn.Parameter(torch.empty(hidden_size, intermediate_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (F.silu(x @ self.gate_weight.T) * (x @ self.up_weight.T)) @ self.down_weight.T


class HybridBlock(nn.Module):
    """Pre-norm residual block: `h += mixer(norm(h)); h += mlp(norm(h))`."""

    def __init__(self, config: ModelConfig, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.mixer_norm = RMSNorm(config.hidden_size)
        self.mixer: AttentionMixer | MambaMixer
        if kind == MAMBA:
            self.mixer = MambaMixer(
                config.hidden_size,
                config.mamba_inner_size,
                config.d_state,
                config.d_conv,
                dt_rank=math.ceil(config.hidden_size / 16),
            )
        else:
            self.mixer = AttentionMixer(
                config.hidden_size,
                config.num_heads,
                config.num_kv_heads,
                config.head_dim,
                config.rope_theta,
                config.sliding_window if kind == SWA else None,
            )
        self.mlp_norm = RMSNorm(config.hidden_size)
        self.mlp = GatedMLP(config.hidden_size, config.intermediate_size)


def _init_parameter(name: str, shape: torch.Size, gen: torch.Generator) -> torch.Tensor:
    """A float64 CPU tensor for parameter `name`; the recipe keeps activations O(1)."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "weight" and len(shape) == 1:  # RMSNorm gains, jittered to exercise them
        return 1 + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
    if leaf == "A_log":  # S4D-real: decay rates 1..d_state per channel
        rates = torch.arange(1, shape[1] + 1, dtype=torch.float64)
        return rates.log().expand(shape).clone()
    if leaf == "dt_bias":  # softplus(dt_bias) spread log-uniformly over [0.01, 0.2]
        u = torch.rand(shape, generator=gen, dtype=torch.float64)
        dt = torch.exp(math.log(0.01) + u * (math.log(0.2) - math.log(0.01)))
        return dt + torch.log(-torch.expm1(-dt))
    if leaf == "D":
        return 1 + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
    if leaf == "conv_bias":
        return 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
    fan_in = shape[-1]
    return torch.randn(shape, generator=gen, dtype=torch.float64) / math.sqrt(fan_in)


class TinyHybridModel(nn.Module):
    """Weights are fixed by `config.seed`; `device` only says where they live."""

    def __init__(self, config: ModelConfig, device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Parameter(torch.empty(config.vocab_size, config.hidden_size))
        self.blocks = nn.ModuleList(HybridBlock(config, kind) for kind in config.layer_pattern)
        self.final_norm = RMSNorm(config.hidden_size)
        self.lm_head = (
            None
            if config.tie_word_embeddings
            else nn.Parameter(torch.empty(config.vocab_size, config.hidden_size))
        )
        gen = torch.Generator().manual_seed(config.seed)
        with torch.no_grad():
            for name, param in self.named_parameters():
                value = _init_parameter(name, param.shape, gen)
                if name == "embed":  # unit-scale rows: the tied head reads them as logits
                    value = value * math.sqrt(config.hidden_size)
                param.copy_(value)
        self.to(device=device, dtype=config.dtype)

    @property
    def device(self) -> torch.device:
        return self.embed.device

    def _check_token_ids(self, token_ids: torch.Tensor) -> None:
        if token_ids.dim() != 1 or token_ids.dtype != torch.int64:
            raise TypeError(
                f"token_ids must be a 1-D int64 tensor, got {token_ids.dtype} "
                f"shape {tuple(token_ids.shape)}"
            )
        bad = token_ids[(token_ids < 0) | (token_ids >= self.config.vocab_size)]
        if bad.numel():
            raise ValueError(f"token id {int(bad[0])} outside [0, {self.config.vocab_size})")

    @torch.no_grad()
    def forward(self, token_ids: torch.Tensor, start_pos: int, store: RequestState) -> torch.Tensor:
        """Runs new tokens `[n]` of one request at positions `[start_pos, start_pos + n)`.

        `store` must hold the request's state after positions `[0, start_pos)`; on return it
        holds the state after `[0, start_pos + n)`. Returns logits `[n, vocab_size]`.
        """
        if start_pos < 0 or token_ids.numel() == 0:
            raise ValueError(
                f"need start_pos >= 0 and at least one token, got start_pos={start_pos}, "
                f"{token_ids.numel()} tokens"
            )
        return self._run(token_ids, [start_pos], [store])

    @torch.no_grad()
    def decode(
        self, token_ids: torch.Tensor, positions: list[int], stores: list[RequestState]
    ) -> torch.Tensor:
        """One new token per request: token `i` at `positions[i]` of `stores[i]` (distinct
        requests: a store appearing twice would see its own write mid-step).

        Dense layers and Mamba layers run batched; attention loops over requests.
        Returns logits `[b, vocab_size]`, equal to `b` separate single-token `forward`s.
        """
        if not (token_ids.numel() == len(positions) == len(stores) >= 1):
            raise ValueError(
                f"decode needs one position and one store per token, got {token_ids.numel()} "
                f"tokens, {len(positions)} positions, {len(stores)} stores"
            )
        if min(positions) < 0:
            raise ValueError(f"decode positions must be >= 0, got {positions}")
        return self._run(token_ids, positions, stores)

    def _run(
        self, token_ids: torch.Tensor, start_positions: list[int], stores: list[RequestState]
    ) -> torch.Tensor:
        """`b = len(stores)` requests with `n` tokens each; rows of `token_ids` are grouped
        by request: rows `[i*n, (i+1)*n)` belong to `stores[i]` at `start_positions[i]`."""
        self._check_token_ids(token_ids)
        token_ids = token_ids.to(self.device)
        b = len(stores)
        n = token_ids.numel() // b
        offsets = torch.arange(n, device=self.device)
        positions = torch.cat([offsets + s for s in start_positions])
        h: torch.Tensor = self.embed[token_ids]
        for layer_id, module in enumerate(self.blocks):
            block = cast(HybridBlock, module)
            x: torch.Tensor = block.mixer_norm(h)
            mixer = block.mixer
            if isinstance(mixer, MambaMixer):
                conv, ssm = self._read_mamba(layer_id, start_positions, stores)
                y, conv, ssm = mixer(x.view(b, n, -1), conv, ssm)
                for i, store in enumerate(stores):
                    store.write_mamba_state(layer_id, conv[i], ssm[i])
                h = h + y.reshape(b * n, -1)
            else:
                q, k, v = mixer.project(x, positions)
                rows = [slice(i * n, (i + 1) * n) for i in range(b)]
                attended = torch.cat(
                    [
                        mixer.attend(q[r], k[r], v[r], start, store, layer_id)
                        for r, start, store in zip(rows, start_positions, stores, strict=True)
                    ]
                )
                h = h + mixer.output(attended)
            h = h + block.mlp(block.mlp_norm(h))
        h = self.final_norm(h)
        if self.lm_head is None:
            return (h @ self.embed.T) / math.sqrt(self.config.hidden_size)
        return h @ self.lm_head.T

    def _read_mamba(
        self, layer_id: int, start_positions: list[int], stores: list[RequestState]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Stacked `(conv, ssm)` states of the requests; zeros for one starting at 0."""
        conv_states, ssm_states = [], []
        config = self.config  # every Mamba layer's states have the config's shapes
        for start, store in zip(start_positions, stores, strict=True):
            if start == 0:
                conv = torch.zeros(config.conv_state_shape, dtype=config.dtype)
                ssm = torch.zeros(config.ssm_state_shape, dtype=config.dtype)
            else:
                conv, ssm = store.read_mamba_state(layer_id)
                if (tuple(conv.shape), tuple(ssm.shape)) != (
                    config.conv_state_shape,
                    config.ssm_state_shape,
                ):
                    raise ValueError(
                        f"layer {layer_id}: store returned Mamba states {tuple(conv.shape)}, "
                        f"{tuple(ssm.shape)}, expected {config.conv_state_shape}, "
                        f"{config.ssm_state_shape}"
                    )
            conv_states.append(conv.to(self.device))
            ssm_states.append(ssm.to(self.device))
        return torch.stack(conv_states), torch.stack(ssm_states)
