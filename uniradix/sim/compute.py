"""A rough prefill compute model, to turn hit tokens into FLOPs saved for a model shape.

Per token and layer: `24 * hidden^2` FLOPs for the weight matmuls (attention projections
4 h^2 and a 4x MLP 8 h^2 weights, 2 FLOPs per weight; Mamba mixers are counted the same), plus
attention over the context: `4 * hidden * keys` (QK^T and AV), where a full-attention token at
position `i` sees `i + 1` keys and an SWA token `min(i + 1, window)`. Reusing a cached prefix
of `n` tokens saves exactly the cost of computing those `n` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    full_layers: int = 32
    swa_layers: int = 0
    mamba_layers: int = 0
    hidden_size: int = 4096
    sliding_window: int = 4096

    def __post_init__(self) -> None:
        counts = (self.full_layers, self.swa_layers, self.mamba_layers)
        if min(counts) < 0 or sum(counts) == 0 or self.hidden_size < 1 or self.sliding_window < 1:
            raise ValueError(f"invalid model shape {self}")

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of full-attention KV per token: K and V, bf16, one hidden size per layer
        (no GQA); the unit of the replay's host-tier transfer volumes."""
        return 2 * 2 * self.hidden_size * self.full_layers

    @property
    def num_layers(self) -> int:
        return self.full_layers + self.swa_layers + self.mamba_layers

    def prefix_flops(self, num_tokens: int) -> float:
        """FLOPs to prefill tokens `[0, num_tokens)` of a sequence."""
        n, h, w = num_tokens, self.hidden_size, self.sliding_window
        linear = 24.0 * h * h * n * self.num_layers
        full_keys = n * (n + 1) / 2
        swa_keys = full_keys if n <= w else w * (w + 1) / 2 + (n - w) * w
        attention = 4.0 * h * (self.full_layers * full_keys + self.swa_layers * swa_keys)
        return linear + attention
