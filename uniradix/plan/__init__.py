"""Capacity planning: model shapes in bytes, memory budgets turned into pools, and sweeps of
budgets and splits through the replay (`uniradix plan`)."""

from uniradix.plan.models import ModelSpec, from_hf_config, load_hf_config
from uniradix.plan.presets import PRESET_CONFIGS, preset

__all__ = ["PRESET_CONFIGS", "ModelSpec", "from_hf_config", "load_hf_config", "preset"]
