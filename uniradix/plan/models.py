"""ModelSpec: the cache-relevant shape of a served model, and its bytes per pool unit.

A spec counts layers per kind (full attention, sliding-window attention, Mamba-style state)
and the tensors each kind caches:

- full / SWA token: `layers * 2 (K and V) * num_kv_heads * head_dim * kv_dtype_bytes`;
- Mamba state (one slot, all Mamba layers): `layers * (conv_elems * conv_dtype_bytes +
  ssm_elems * ssm_dtype_bytes)`, where per layer

  ============================  =================================  ======================
  mixer                         conv state elements                SSM state elements
  ============================  =================================  ======================
  Mamba-1 (Jamba)               d_inner * (d_conv - 1)             d_inner * d_state
  Mamba-2 (Nemotron-H, Falcon)  (d_inner + 2 groups d_state)       heads * head_dim *
                                * (d_conv - 1)                     d_state
  Gated DeltaNet (Qwen3-Next)   (2 k_heads k_dim + v_heads v_dim)  v_heads * k_dim * v_dim
                                * (kernel - 1)
  ============================  =================================  ======================

`from_hf_config` reads a Hugging Face `config.json` (the common field names of the model
families above); the presets in `uniradix.plan.presets` are such configs, cut to the fields
read here. Falcon-H1 layers are parallel hybrids: each has attention and a Mamba mixer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uniradix.sim.compute import ModelShape

DTYPE_BYTES = {
    "float64": 8,
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "fp8": 1,
}
# Per-layer kinds in `layer_types` / `layers_block_type` / `hybrid_override_pattern`.
FULL_KINDS = {"full_attention", "attention", "global_attention"}
SWA_KINDS = {"sliding_attention", "sliding_window_attention", "local_attention"}
MAMBA_KINDS = {"linear_attention", "mamba", "mamba2", "ssm"}
OTHER_KINDS = {"mlp", "moe"}
PATTERN_KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
# The FLOPs model needs a window even without SWA layers (it is then unused).
NO_WINDOW = 4096


@dataclass(frozen=True)
class ModelSpec:
    name: str
    full_layers: int
    swa_layers: int
    mamba_layers: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    kv_dtype_bytes: int
    sliding_window: int | None = None
    mamba_conv_elems: int = 0
    mamba_ssm_elems: int = 0
    mamba_conv_dtype_bytes: int = 2
    mamba_ssm_dtype_bytes: int = 2

    def __post_init__(self) -> None:
        counts = (self.full_layers, self.swa_layers, self.mamba_layers)
        sizes = (self.num_kv_heads, self.head_dim, self.hidden_size, self.kv_dtype_bytes)
        if min(counts) < 0 or min(sizes) < 1:
            raise ValueError(f"model {self.name!r}: layer counts must be >= 0 and sizes >= 1")
        if self.full_layers < 1:
            raise ValueError(
                f"model {self.name!r} has no full-attention layer; the cache indexes tokens "
                "by their full-attention KV, so at least one is needed"
            )
        if self.swa_layers and (self.sliding_window is None or self.sliding_window < 1):
            raise ValueError(
                f"model {self.name!r}: {self.swa_layers} SWA layers need sliding_window >= 1, "
                f"got {self.sliding_window}"
            )
        if self.mamba_layers and min(self.mamba_conv_elems, self.mamba_ssm_elems) < 1:
            raise ValueError(
                f"model {self.name!r}: {self.mamba_layers} Mamba layers need conv and SSM "
                f"state shapes, got {self.mamba_conv_elems} and {self.mamba_ssm_elems} elements"
            )

    @property
    def full_token_bytes(self) -> int:
        return self.full_layers * self._kv_layer_token_bytes

    @property
    def swa_token_bytes(self) -> int:
        return self.swa_layers * self._kv_layer_token_bytes

    @property
    def mamba_state_bytes(self) -> int:
        per_layer = (
            self.mamba_conv_elems * self.mamba_conv_dtype_bytes
            + self.mamba_ssm_elems * self.mamba_ssm_dtype_bytes
        )
        return self.mamba_layers * per_layer

    @property
    def _kv_layer_token_bytes(self) -> int:
        return 2 * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes

    def pools(self) -> tuple[str, ...]:
        """The cache pools this model fills: "full", then "swa" and/or "mamba"."""
        names = ["full"]
        if self.swa_layers:
            names.append("swa")
        if self.mamba_layers:
            names.append("mamba")
        return tuple(names)

    def replay_config(self) -> str:
        """The `uniradix replay --config` of this shape."""
        return {
            ("full",): "full",
            ("full", "swa"): "swa",
            ("full", "mamba"): "mamba",
            ("full", "swa", "mamba"): "hybrid",
        }[self.pools()]

    def unit_bytes(self) -> dict[str, int]:
        """Bytes of one unit of each pool: a token of "full" / "swa", a "mamba" state slot."""
        sizes = {
            "full": self.full_token_bytes,
            "swa": self.swa_token_bytes,
            "mamba": self.mamba_state_bytes,
        }
        return {pool: sizes[pool] for pool in self.pools()}

    def compute_shape(self) -> ModelShape:
        """The shape `uniradix.sim.compute` estimates prefill FLOPs with."""
        return ModelShape(
            self.full_layers,
            self.swa_layers,
            self.mamba_layers,
            self.hidden_size,
            self.sliding_window or NO_WINDOW,
        )


def _get(config: dict[str, Any], names: tuple[str, ...], default: Any = None) -> Any:
    """The value of the first of `names` present (and not null) in `config`."""
    for name in names:
        if config.get(name) is not None:
            return config[name]
    if default is None:
        raise ValueError(f"config.json has none of {', '.join(names)}")
    return default


def _int(config: dict[str, Any], names: tuple[str, ...], default: int | None = None) -> int:
    value = _get(config, names, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"config.json: {names[0]} must be an integer >= 0, got {value!r}")
    return value


def _dtype_bytes(name: Any, field: str) -> int:
    key = str(name).removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise ValueError(f"config.json: unknown {field} {name!r}; known: {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[key]


def layer_kinds(config: dict[str, Any]) -> list[str]:
    """One kind per layer: "full", "swa", "mamba", "hybrid" (attention and Mamba in one
    layer, Falcon-H1) or "other" (MLP-only and MoE layers of Nemotron-H)."""
    n = _int(config, ("num_hidden_layers", "n_layer", "num_layers"), 0)
    raw: list[str]
    if config.get("model_type") == "falcon_h1":
        return ["hybrid"] * n
    if isinstance(config.get("layer_types"), list):
        raw = config["layer_types"]
    elif isinstance(config.get("layers_block_type"), list):
        raw = config["layers_block_type"]
    elif isinstance(config.get("hybrid_override_pattern"), str):
        pattern = config["hybrid_override_pattern"]
        if set(pattern) - set(PATTERN_KINDS):
            raise ValueError(f"config.json: unknown symbols in hybrid_override_pattern {pattern!r}")
        raw = [PATTERN_KINDS[c] for c in pattern]
    elif "attn_layer_period" in config:  # Jamba
        period, offset = _int(config, ("attn_layer_period",)), _int(config, ("attn_layer_offset",))
        raw = ["attention" if i % period == offset else "mamba" for i in range(n)]
    elif "full_attention_interval" in config:  # Qwen3-Next
        every = _int(config, ("full_attention_interval",))
        raw = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
    elif "sliding_window_pattern" in config:  # Gemma-3: every N-th layer is global
        every = _int(config, ("sliding_window_pattern",))
        raw = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(n)]
    else:  # no per-layer types: every layer is full attention (sliding_window is ignored)
        raw = ["full_attention"] * n
    if not raw:
        raise ValueError("config.json: no layers (num_hidden_layers or layer_types)")
    kinds = []
    for kind in raw:
        if kind in FULL_KINDS:
            kinds.append("full")
        elif kind in SWA_KINDS:
            kinds.append("swa")
        elif kind in MAMBA_KINDS:
            kinds.append("mamba")
        elif kind in OTHER_KINDS:
            kinds.append("other")
        else:
            raise ValueError(f"config.json: unknown layer type {kind!r}")
    return kinds


def _mamba_state_elems(config: dict[str, Any], hidden: int) -> tuple[int, int]:
    """(conv, SSM) state elements of one Mamba-style layer, per the module docstring."""
    if "linear_num_value_heads" in config:  # Gated DeltaNet
        k_heads = _int(config, ("linear_num_key_heads",))
        v_heads = _int(config, ("linear_num_value_heads",))
        k_dim = _int(config, ("linear_key_head_dim",))
        v_dim = _int(config, ("linear_value_head_dim",))
        kernel = _int(config, ("linear_conv_kernel_dim",))
        return (2 * k_heads * k_dim + v_heads * v_dim) * (kernel - 1), v_heads * k_dim * v_dim
    d_state = _int(config, ("ssm_state_size", "mamba_d_state", "d_state", "state_size"))
    d_conv = _int(config, ("conv_kernel", "mamba_d_conv", "d_conv"))
    expand = _int(config, ("mamba_expand", "expand"), 2)
    heads = _get(config, ("mamba_num_heads", "mamba_n_heads", "num_heads"), 0)
    if heads:  # Mamba-2
        d_inner = _int(config, ("mamba_d_ssm",), expand * hidden)
        head_dim = _get(config, ("mamba_head_dim", "mamba_d_head", "head_dim"), "auto")
        head_dim = d_inner // heads if head_dim == "auto" else int(head_dim)
        groups = _int(config, ("n_groups", "mamba_n_groups", "ngroups"), 1)
        d_inner = heads * head_dim
        return (d_inner + 2 * groups * d_state) * (d_conv - 1), heads * head_dim * d_state
    d_inner = _int(config, ("intermediate_size_mamba", "d_inner"), expand * hidden)
    return d_inner * (d_conv - 1), d_inner * d_state  # Mamba-1


def from_hf_config(config: dict[str, Any], name: str = "config.json") -> ModelSpec:
    """The spec of a Hugging Face `config.json` (a `text_config` inside is used if present)."""
    if isinstance(config.get("text_config"), dict):  # multimodal wrappers (Gemma-3 4B+)
        config = {
            **config["text_config"],
            **{k: config[k] for k in ("torch_dtype",) if k in config},
        }
    kinds = layer_kinds(config)
    hidden = _int(config, ("hidden_size", "d_model"))
    heads = _int(config, ("num_attention_heads",), 1)
    kv_heads = _int(config, ("num_key_value_heads",), heads)
    head_dim = _int(config, ("head_dim",), hidden // max(heads, 1))
    dtype = _dtype_bytes(_get(config, ("torch_dtype", "dtype"), "bfloat16"), "torch_dtype")
    full = sum(k in ("full", "hybrid") for k in kinds)
    swa = kinds.count("swa")
    mamba = sum(k in ("mamba", "hybrid") for k in kinds)
    conv, ssm = _mamba_state_elems(config, hidden) if mamba else (0, 0)
    ssm_dtype = config.get("mamba_ssm_cache_dtype") or config.get("mamba_ssm_dtype")
    return ModelSpec(
        name=name,
        full_layers=full,
        swa_layers=swa,
        mamba_layers=mamba,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        kv_dtype_bytes=dtype,
        sliding_window=_int(config, ("sliding_window",)) if swa else None,
        mamba_conv_elems=conv,
        mamba_ssm_elems=ssm,
        mamba_conv_dtype_bytes=dtype,
        mamba_ssm_dtype_bytes=_dtype_bytes(ssm_dtype, "mamba_ssm_cache_dtype")
        if ssm_dtype
        else dtype,
    )


def load_hf_config(path: str | Path) -> ModelSpec:
    """The spec of the `config.json` at `path`; ValueError naming the file if it is unusable."""
    path = Path(path)
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object")
    try:
        return from_hf_config(config, path.name)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
