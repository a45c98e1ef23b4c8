"""Wire shapes of a KV event batch, as msgpack bytes (docs/events.md).

- `map` (default): events are maps with a `"type"` tag, optional nulls left out; what vLLM
  after #42892 and SGLang 0.5.23 send.
- `vllm-array`: positional `[tag, hashes, parent, tokens, block_size, lora_id, medium]`,
  exactly the base every positional consumer reads (the Dec-2025 llm-d manager needs
  exactly these 6 fields); `BlockRemoved` is `[tag, hashes, medium]`.
- `sglang-array`: the same 7 elements; a salted store appends SGLang's metadata map
  `{"cache_salt": ...}` as an 8th.

SWA / Mamba group events (`uniradix.events.groups`) carry vLLM's hybrid tail in
`vllm-array` (`lora_name, extra_keys, group_idx, kind, window`; a remove `group_idx`); the
SGLang shape has no place for them, so a stream in it publishes the full group only.

The batch is always the 3-element array `[ts, events, dp_rank]`. `decode_batch` reads every
shape back into the map structs.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

import msgspec

from uniradix.events.types import (
    STORED_HEAD_LEN,
    AllBlocksCleared,
    ArrayBlockRemoved,
    ArrayBlockStored,
    ArrayKVEvent,
    ArrayKVEventBatch,
    BlockRemoved,
    BlockStored,
    KVEvent,
    KVEventBatch,
    StoredHead,
)
from uniradix.hashing.node_digests import hash_cells

WIRE_SHAPES = ("map", "vllm-array", "sglang-array")

_encoder = msgspec.msgpack.Encoder()
_map_decoder = msgspec.msgpack.Decoder(KVEventBatch)
_array_decoder = msgspec.msgpack.Decoder(ArrayKVEventBatch)


def check_wire(wire: str) -> str:
    if wire not in WIRE_SHAPES:
        raise ValueError(f"unknown wire shape {wire!r}; choose from {WIRE_SHAPES}")
    return wire


def _positional(event: KVEvent, wire: str) -> list[Any]:
    if isinstance(event, BlockStored):
        out: list[Any] = ["BlockStored", *msgspec.structs.astuple(event)[:STORED_HEAD_LEN]]
        if wire == "sglang-array" and event.cache_salt:
            out.append({"cache_salt": event.cache_salt})
        elif wire == "vllm-array" and _auxiliary(event):
            out += [event.lora_name, None, event.group_idx, event.kv_cache_spec_kind]
            out.append(event.kv_cache_spec_sliding_window)
        return out
    if isinstance(event, BlockRemoved):
        if wire == "vllm-array" and event.group_idx:
            return ["BlockRemoved", event.block_hashes, event.medium, event.group_idx]
        return ["BlockRemoved", event.block_hashes, event.medium]
    return ["AllBlocksCleared"]


def _auxiliary(event: BlockStored) -> bool:
    """An SWA / Mamba group's store (`events.groups`): positional vLLM events then carry
    the hybrid tail, as vLLM's own do; full-attention stores keep the 7-element base."""
    kind = event.kv_cache_spec_kind
    return kind is not None and kind != "full_attention"


def encode_batch(events: Sequence[KVEvent], ts: float, dp_rank: int, wire: str = "map") -> bytes:
    """The msgpack payload of one batch in the `wire` shape; a batch that encodes itself (a
    recorder's `StepEvents`, from its arrays: the same bytes) does."""
    check_wire(wire)
    encode = getattr(events, "encode", None)
    if encode is not None:
        payload: bytes = encode(ts, dp_rank, wire)
        return payload
    if wire == "map":
        return _encoder.encode(KVEventBatch(ts, list(events), dp_rank))
    return _encoder.encode([ts, [_positional(e, wire) for e in events], dp_rank])


def prepare_batches(batches: Sequence[Sequence[KVEvent]]) -> None:
    """Hashes at once the digests of every batch that names them unhashed (a recorder's
    `StepEvents`: `cells()`), so that encoding them lets go of the GIL once, not once per
    node (`hashing.node_digests.hash_cells`)."""
    named = [getattr(batch, "cells", None) for batch in batches]
    hash_cells(chain.from_iterable(cells() for cells in named if cells is not None))


def _from_array(event: ArrayKVEvent) -> KVEvent:
    if isinstance(event, ArrayBlockStored):
        meta = event.metadata
        salt = meta.get("cache_salt") if isinstance(meta, dict) else None
        head = {name: getattr(event, name) for name in StoredHead.__struct_fields__}
        return BlockStored(
            **head,
            lora_name=meta if isinstance(meta, str) else None,
            cache_salt=salt,
            group_idx=event.group_idx,
            kv_cache_spec_kind=event.kv_cache_spec_kind,
            kv_cache_spec_sliding_window=event.kv_cache_spec_sliding_window,
        )
    if isinstance(event, ArrayBlockRemoved):
        return BlockRemoved(event.block_hashes, event.medium, group_idx=event.group_idx)
    return AllBlocksCleared()


def decode_batch(payload: bytes) -> KVEventBatch:
    """Decodes a batch in any wire shape; raises `msgspec.DecodeError` (a `ValueError`) on
    anything else."""
    try:
        return _map_decoder.decode(payload)
    except msgspec.ValidationError:
        batch = _array_decoder.decode(payload)
    return KVEventBatch(batch.ts, [_from_array(e) for e in batch.events], batch.data_parallel_rank)
