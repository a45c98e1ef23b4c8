"""KV event types as routers decode them (vLLM / SGLang `kv_events`, see docs/events.md):
`BlockStored`, `BlockRemoved`, `AllBlocksCleared`, and the batch
`[ts, events, dp_rank]` published at most once per scheduler step (`KVEventStream`).

The map-shaped structs (`BlockStored`, ...) are what the library builds and what the default
`map` wire shape encodes: a `"type"` tag key, optional nulls left out. The `Array*` structs
decode the positional wire shapes (`vllm-array`, `sglang-array`), tag first. Hashes are
signed int64 (SGLang's chained SHA-256, `uniradix.hashing.page.digest_to_int64`).
"""

from __future__ import annotations

import msgspec


class StoredHead(msgspec.Struct):
    """The fields every shape of a store event starts with, in wire order: the positional
    shapes' 7-element base is the tag and these."""

    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


STORED_HEAD_LEN = len(StoredHead.__struct_fields__)


class BlockStored(StoredHead, tag=True, omit_defaults=True):
    """Full pages that entered a tier: one hash per page of `block_size` tokens, chained from
    `parent_block_hash` (None: the chain starts at the root)."""

    lora_name: str | None
    cache_salt: str | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class BlockRemoved(msgspec.Struct, tag=True, omit_defaults=True):
    """Pages that left a tier, deepest first."""

    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(msgspec.Struct, tag=True):
    """Every page of the publisher is gone (start-up, `reset()`, or a resync after a drop)."""


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


class KVEventBatch(msgspec.Struct, array_like=True):
    """One published batch (a step's events, or several steps' coalesced); always the
    3-element array routers require."""

    ts: float
    events: list[KVEvent]
    data_parallel_rank: int | None = None


class ArrayBlockStored(StoredHead, tag="BlockStored", array_like=True):
    """Positional `BlockStored`: 7 elements; SGLang salted stores add a metadata map, vLLM's
    hybrid events `lora_name, extra_keys, group_idx, kind, window` (position 7 is either)."""

    metadata: dict[str, str] | str | None = None
    extra_keys: list[object] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class ArrayBlockRemoved(msgspec.Struct, tag="BlockRemoved", array_like=True):
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None


class ArrayAllBlocksCleared(msgspec.Struct, tag="AllBlocksCleared", array_like=True):
    pass


ArrayKVEvent = ArrayBlockStored | ArrayBlockRemoved | ArrayAllBlocksCleared


class ArrayKVEventBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[ArrayKVEvent]
    data_parallel_rank: int | None = None
