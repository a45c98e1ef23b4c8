"""`--model NAME` presets: public `config.json` values of well-known models, cut to the fields
`uniradix.plan.models.from_hf_config` reads. Each entry says where its values come from.

Only the cache-relevant fields are kept (layer kinds, KV heads, head dim, window, Mamba state
shapes, dtype); the parameter counts, MoE sizes and vocabularies do not change what a cache
holds. Where a checkpoint's `config.json` could not be read here, the values are those of the
Hugging Face transformers configuration class whose docstring names that checkpoint, or of the
model's published architecture table; the comment says which.
"""

from __future__ import annotations

from typing import Any

from uniradix.plan.models import ModelSpec, from_hf_config

PRESET_CONFIGS: dict[str, dict[str, Any]] = {
    # meta-llama/Meta-Llama-3-8B config.json: 32 layers, 32 heads, 8 KV heads, hidden 4096
    # (head_dim 4096 / 32 = 128), bfloat16. Full attention only.
    "llama-3-8b": {
        "model_type": "llama",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "torch_dtype": "bfloat16",
    },
    # google/gemma-3-27b: 62 layers, 32 heads, 16 KV heads, head_dim 128, hidden 5376,
    # sliding_window 1024, sliding_window_pattern 6 (every 6th layer global: 10 full, 52 SWA),
    # bfloat16 (transformers Gemma3TextConfig fields; values of the 27B text config).
    "gemma-3-27b": {
        "model_type": "gemma3_text",
        "num_hidden_layers": 62,
        "hidden_size": 5376,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
        "torch_dtype": "bfloat16",
    },
    # transformers GptOssConfig defaults (36 layers: gpt-oss-120b): hidden 2880, 64 heads,
    # 8 KV heads, head_dim 64, sliding_window 128, layer_types alternating sliding / full
    # (18 + 18), bfloat16 KV.
    "gpt-oss-120b": {
        "model_type": "gpt_oss",
        "num_hidden_layers": 36,
        "hidden_size": 2880,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 18,
        "torch_dtype": "bfloat16",
    },
    # Qwen/Qwen3-Next-80B-A3B (transformers Qwen3NextConfig defaults, whose docstring names
    # that checkpoint): 48 layers, full_attention_interval 4 (12 full, 36 Gated DeltaNet),
    # hidden 2048, 16 heads, 2 KV heads, head_dim 256; linear attention 16 key heads and
    # 32 value heads of 128, conv kernel 4; bfloat16.
    "qwen3-next-80b-a3b": {
        "model_type": "qwen3_next",
        "num_hidden_layers": 48,
        "full_attention_interval": 4,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "torch_dtype": "bfloat16",
    },
    # nvidia/NVIDIA-Nemotron-Nano-9B-v2 (Nemotron-H) config.json: 56 layers, pattern below
    # (27 Mamba-2, 4 attention, 25 MLP), hidden 4480, 40 heads, 8 KV heads, head_dim 128;
    # Mamba-2 128 heads of 80, ssm_state_size 128, n_groups 8, conv_kernel 4; bfloat16, with
    # SSM states in float32 (transformers NemotronHConfig mamba_ssm_cache_dtype default).
    "nemotron-nano-9b-v2": {
        "model_type": "nemotron_h",
        "num_hidden_layers": 56,
        "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
        "hidden_size": 4480,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "mamba_num_heads": 128,
        "mamba_head_dim": 80,
        "ssm_state_size": 128,
        "n_groups": 8,
        "conv_kernel": 4,
        "mamba_ssm_cache_dtype": "float32",
        "torch_dtype": "bfloat16",
    },
    # ai21labs/Jamba-v0.1 (transformers JambaConfig defaults, "similar to Jamba-v0.1"):
    # 32 layers, attn_layer_period 8, attn_layer_offset 4 (4 attention, 28 Mamba-1), hidden
    # 4096, 32 heads, 8 KV heads; mamba_d_state 16, mamba_d_conv 4, mamba_expand 2; bfloat16.
    "jamba-v0.1": {
        "model_type": "jamba",
        "num_hidden_layers": 32,
        "attn_layer_period": 8,
        "attn_layer_offset": 4,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "torch_dtype": "bfloat16",
    },
    # tiiuae/Falcon-H1-7B (transformers FalconH1 model table: depth 44, dim 3072, 12 heads,
    # 2 KV heads, 24 Mamba heads, head dims 128 / 128, d_state 256); mamba_n_groups 1 and
    # mamba_d_conv 4 are FalconH1Config defaults; bfloat16. Every layer runs attention and a
    # Mamba-2 mixer in parallel.
    "falcon-h1-7b": {
        "model_type": "falcon_h1",
        "num_hidden_layers": 44,
        "hidden_size": 3072,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "mamba_n_heads": 24,
        "mamba_d_head": 128,
        "mamba_d_ssm": 3072,
        "mamba_d_state": 256,
        "mamba_n_groups": 1,
        "mamba_d_conv": 4,
        "torch_dtype": "bfloat16",
    },
}


def preset(name: str) -> ModelSpec:
    """The spec of preset `name`; ValueError listing the presets for an unknown name."""
    if name not in PRESET_CONFIGS:
        raise ValueError(f"unknown model {name!r}; choose from {sorted(PRESET_CONFIGS)}")
    return from_hf_config(PRESET_CONFIGS[name], name)
