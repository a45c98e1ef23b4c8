"""Model shapes: presets give the per-unit bytes hand-computed from their cited config values,
and any config.json reads back to the same spec."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from uniradix.plan import PRESET_CONFIGS, from_hf_config, load_hf_config, preset

BF16, FP32 = 2, 4


def kv(layers: int, kv_heads: int, head_dim: int) -> int:
    return layers * 2 * kv_heads * head_dim * BF16


# (preset, full layers, SWA layers, Mamba layers, full bytes/token, SWA bytes/token, bytes/state)
EXPECTED = [
    ("llama-3-8b", 32, 0, 0, kv(32, 8, 4096 // 32), 0, 0),
    ("gemma-3-27b", 10, 52, 0, kv(10, 16, 128), kv(52, 16, 128), 0),
    ("gpt-oss-120b", 18, 18, 0, kv(18, 8, 64), kv(18, 8, 64), 0),
    # Gated DeltaNet: conv (2*16*128 + 32*128) * (4-1), recurrent 32 * 128 * 128.
    ("qwen3-next-80b-a3b", 12, 0, 36, kv(12, 2, 256), 0,
     36 * ((2 * 16 * 128 + 32 * 128) * 3 + 32 * 128 * 128) * BF16),
    # Mamba-2: conv (128*80 + 2*8*128) * 3 in bf16, SSM 128 * 80 * 128 in fp32.
    ("nemotron-nano-9b-v2", 4, 0, 27, kv(4, 8, 128), 0,
     27 * ((128 * 80 + 2 * 8 * 128) * 3 * BF16 + 128 * 80 * 128 * FP32)),
    # Mamba-1: d_inner = 2 * 4096; conv d_inner * 3, SSM d_inner * 16.
    ("jamba-v0.1", 4, 0, 28, kv(4, 8, 128), 0, 28 * (8192 * 3 + 8192 * 16) * BF16),
    # Parallel hybrid: 44 layers of both; Mamba-2 conv (3072 + 2*256) * 3, SSM 24 * 128 * 256.
    ("falcon-h1-7b", 44, 0, 44, kv(44, 2, 128), 0,
     44 * ((3072 + 2 * 256) * 3 + 24 * 128 * 256) * BF16),
]  # fmt: skip


@pytest.mark.parametrize("name, full, swa, mamba, full_b, swa_b, mamba_b", EXPECTED)
def test_preset_bytes(
    name: str, full: int, swa: int, mamba: int, full_b: int, swa_b: int, mamba_b: int
) -> None:
    spec = preset(name)
    assert (spec.full_layers, spec.swa_layers, spec.mamba_layers) == (full, swa, mamba)
    assert spec.full_token_bytes == full_b
    assert spec.swa_token_bytes == swa_b
    assert spec.mamba_state_bytes == mamba_b


def test_published_figures() -> None:
    # Llama-3-8B's KV cache is the widely quoted 128 KiB per token in bf16.
    assert preset("llama-3-8b").full_token_bytes == 128 * 1024
    assert preset("gemma-3-27b").sliding_window == 1024
    assert preset("gpt-oss-120b").replay_config() == "swa"
    assert preset("jamba-v0.1").replay_config() == "mamba"
    assert set(PRESET_CONFIGS) == {e[0] for e in EXPECTED}


@pytest.mark.parametrize("name", sorted(PRESET_CONFIGS))
def test_config_json_round_trip(name: str, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**PRESET_CONFIGS[name], "vocab_size": 1000}))
    spec = load_hf_config(path)
    assert spec == replace(preset(name), name="config.json")


def test_layer_type_field_variants() -> None:
    base = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
    mamba = {"ssm_state_size": 16, "conv_kernel": 4, "mamba_num_heads": 8, "mamba_head_dim": 16}
    by_list = from_hf_config(
        {**base, **mamba, "layers_block_type": ["mamba", "attention", "mamba", "mlp"]}
    )
    by_pattern = from_hf_config({**base, **mamba, "hybrid_override_pattern": "M*M-"})
    assert by_list.unit_bytes() == by_pattern.unit_bytes()
    assert (by_pattern.full_layers, by_pattern.mamba_layers) == (1, 2)
    # head_dim from hidden_size / heads; conv (8*16 + 2*1*16) * 3, SSM 8 * 16 * 16, float32.
    assert by_pattern.full_token_bytes == 2 * 2 * 16 * BF16
    fp32 = from_hf_config({**base, **mamba, "hybrid_override_pattern": "M*", "dtype": "float32"})
    assert fp32.mamba_state_bytes == ((8 * 16 + 2 * 16) * 3 + 8 * 16 * 16) * FP32
    plain = from_hf_config({**base, "num_hidden_layers": 3, "sliding_window": 512})
    assert (plain.full_layers, plain.swa_layers, plain.sliding_window) == (3, 0, None)


@pytest.mark.parametrize(
    "config, message",
    [
        ({"hidden_size": 64, "layer_types": ["sliding_attention"], "sliding_window": 8}, "no full"),
        ({"hidden_size": 64, "layer_types": ["conv"]}, "unknown layer type 'conv'"),
        ({"hidden_size": 64, "num_hidden_layers": 2, "torch_dtype": "int3"}, "int3"),
        ({"hidden_size": 64, "hybrid_override_pattern": "M*"}, "ssm_state_size"),
        ({"num_hidden_layers": 2}, "hidden_size"),
        ({"hidden_size": 64, "layer_types": ["full_attention", "sliding_attention"]}, "window"),
    ],
)
def test_bad_configs_name_the_field(config: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        from_hf_config(config)


def test_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("[1]")
    with pytest.raises(ValueError, match=r"config\.json: expected a JSON object"):
        load_hf_config(path)
    with pytest.raises(ValueError, match="unknown model 'llama'"):
        preset("llama")
