"""SGLang keys and slot values as uniradix's tree holds them.

SGLang's `RadixKey` carries int64 token ids (an `array('q')`), an `extra_key` and a
`cache_salt`; both namespace the tree, so they become one uniradix namespace. Slot values
arrive as torch tensors and stay in the tree as host int64 arrays (uniradix's `Slots`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from uniradix.key import RadixKey
from uniradix.slots import Slots


def namespace(sglang_key: Any) -> str | None:
    """One namespace for SGLang's two: different salts never share, as in SGLang."""
    extra, salt = sglang_key.extra_key, getattr(sglang_key, "cache_salt", None)
    if salt is None:
        return extra or None
    return f"{extra or ''}\x00salt:{salt}"


def to_uniradix_key(sglang_key: Any, page_size: int) -> tuple[RadixKey, int]:
    """The key as uniradix's tree walks it, and its length in whole pages (units)."""
    ids = sglang_key.raw_token_ids()
    tokens = np.frombuffer(ids, dtype=np.int64) if len(ids) else np.zeros(0, np.int64)
    num_units = len(tokens) - len(tokens) % page_size
    return RadixKey(tokens, namespace(sglang_key)), num_units


def to_slots(value: torch.Tensor) -> Slots:
    host = value.detach().to("cpu", torch.int64)
    return np.array(host.numpy(), dtype=np.int64, copy=True)


def to_tensor(slots: Slots, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(slots).to(device)
