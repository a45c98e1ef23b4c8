"""SGLang keys and slot values as uniradix's tree holds them.

SGLang's `RadixKey` carries int64 token ids (an `array('q')`), an `extra_key` and a
`cache_salt`; both namespace the tree, so they become one uniradix namespace. Slot values
arrive as torch tensors and stay in the tree as host int64 arrays (uniradix's `Slots`)."""

from __future__ import annotations

from array import array
from typing import Any

import torch

from uniradix.key import RadixKey
from uniradix.slots import Slots

_new_key = object.__new__


def namespace(sglang_key: Any) -> str | None:
    """One namespace for SGLang's two: different salts never share, as in SGLang."""
    extra, salt = sglang_key.extra_key, getattr(sglang_key, "cache_salt", None)
    if salt is None:
        return extra or None
    return f"{extra or ''}\x00salt:{salt}"


def key_units(sglang_key: Any, page_size: int) -> tuple[array[int], str | None, int]:
    """The key's token ids as packed units (SGLang's `array('q')` is packed as uniradix packs
    tokens: no copy), its namespace and its length in whole pages (units): `TreeCore.match`
    and `insert` read them in place. Reads SGLang's `RadixKey` fields itself (`raw_token_ids`
    and `namespace` inline): this runs on every match and insert."""
    ids, limit = sglang_key.token_ids, sglang_key.limit
    if limit is not None and limit < len(ids):
        ids = ids[:limit]
    if type(ids) is not array or ids.typecode != "q":
        ids = array("q", ids)
    extra = sglang_key.extra_key
    ns = (extra or None) if sglang_key.cache_salt is None else namespace(sglang_key)
    return ids, ns, len(ids) - len(ids) % page_size


def to_uniradix_key(sglang_key: Any, page_size: int) -> tuple[RadixKey, int]:
    """The key as uniradix's tree inserts it (`bytes` of its units), and its length in
    whole pages (units)."""
    ids, ns, num_units = key_units(sglang_key, page_size)
    key = _new_key(RadixKey)
    key.units, key.extra_key, key.is_bigram = ids.tobytes(), ns, False
    return key, num_units


def to_slots(value: torch.Tensor, start: int = 0, stop: int | None = None) -> Slots:
    """A host copy of `value[start:stop]`: the caller may reuse its tensor once the tree holds
    the slots. Slices on the numpy view: a fraction of the cost of slicing the tensor."""
    if not value.is_cpu or value.dtype is not torch.int64:
        value = value.detach().to("cpu", torch.int64)
    return value.numpy()[start:stop].copy()


_CPU = torch.device("cpu")


def to_tensor(slots: Slots, device: torch.device) -> torch.Tensor:
    tensor = torch.from_numpy(slots)
    # `.to` its own device returns the tensor itself, after a dispatch that costs more than
    # `from_numpy`: skipped on the CPU (`==`, not `.type`: a sixth of the cost).
    return tensor if device == _CPU else tensor.to(device)
