"""The tiny float64 model configuration the engine tests share."""

import torch

from uniradix.engine import ModelConfig

WINDOW = 4
TINY = ModelConfig(
    hidden_size=32,
    layer_pattern="FSMFSM",
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    sliding_window=WINDOW,
    d_state=4,
    d_conv=3,
    dtype=torch.float64,
)
