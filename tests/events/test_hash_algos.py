"""Block hash algorithms other than the default, over a real ZMQ socket: vLLM's
`sha256_cbor` (checked against an independent implementation built on the `cbor2` library,
which vLLM itself uses) and the EAGLE bigram chain (checked against a hand-rolled chain)."""

from __future__ import annotations

import hashlib
import itertools
import struct

import cbor2
import msgspec
import numpy as np
import pytest

from tests.events.zmq_helpers import loopback_publisher, published
from tests.helpers import alloc, insert_fresh, make_cache
from uniradix import EvictParams, InsertParams, RadixKey
from uniradix.events import BlockRemoved, BlockStored, KVEventBatch, KVEventsConfig, KVEventStream
from uniradix.events.index import KVEventIndex
from uniradix.events.recorder import EventRecorder
from uniradix.hashing.events import block_hashing

DECODER = msgspec.msgpack.Decoder(KVEventBatch)
# Tokens covering every CBOR integer width: < 24, 1, 2, 4 and 8 bytes.
TOKENS = [5, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**40]


def vllm_chain(tokens: list[int], seed: str, lora: str | None, salt: str | None) -> list[int]:
    """vLLM's sha256_cbor block hashes of `tokens` in blocks of 2, as published (last 8
    bytes, unsigned), computed with cbor2 as vLLM does."""
    parent = hashlib.sha256(cbor2.dumps(seed, canonical=True)).digest()  # NONE_HASH
    out = []
    for i in range(0, len(tokens) - len(tokens) % 2, 2):
        extra = [lora] if lora else []
        if i == 0 and salt:
            extra.append(salt)
        data = (parent, tuple(tokens[i : i + 2]), tuple(extra) if extra else None)
        parent = hashlib.sha256(cbor2.dumps(data, canonical=True)).digest()
        out.append(int.from_bytes(parent, "big") & (2**64 - 1))
    return out


def decoded(stream: KVEventStream) -> list[list[object]]:
    return [
        list(DECODER.decode(payload).events)
        for _, _, payload in published(stream.publishers[0])  # type: ignore[arg-type]
    ]


@pytest.mark.parametrize(("lora", "salt"), [(None, None), ("lora-a", None), ("lora-a", "s1")])
def test_vllm_sha256_cbor_over_zmq(lora: str | None, salt: str | None) -> None:
    cache = make_cache(full_tokens=64, page_size=2)
    stream = KVEventStream(
        cache,
        [loopback_publisher()],
        cache_salt=salt,
        hash_algo="vllm_sha256_cbor",
        hash_seed="1234",
        publish_interval_ms=0,
    )
    try:
        stream.flush()
        insert_fresh(cache, TOKENS[:6], extra_key=lora)
        stream.flush()
        insert_fresh(cache, TOKENS, extra_key=lora)  # a child: chains from the parent block
        stream.flush()
        index = KVEventIndex(2, salt, "vllm_sha256_cbor", "1234")
        for batch in decoded(stream):
            index.apply("a", KVEventBatch(0.0, batch, 0))  # type: ignore[arg-type]
        cache.evict(EvictParams(num_tokens=64))
        stream.flush()
        events = decoded(stream)
    finally:
        stream.close()
    h = vllm_chain(TOKENS, "1234", lora, salt)
    kw = {"group_idx": 0, "kv_cache_spec_kind": "full_attention", "cache_salt": salt}
    assert (
        events[1:]
        == [
            [BlockStored(h[:3], None, TOKENS[:6], 2, None, "GPU", lora, **kw)],  # type: ignore[arg-type]
            [BlockStored(h[3:], h[2], TOKENS[6:], 2, None, "GPU", lora, **kw)],  # type: ignore[arg-type]
            [BlockRemoved(h[::-1], "GPU", group_idx=0)],
        ]
    )
    # A router hashing request tokens the same way finds the prefix.
    assert index.prefix_lengths(TOKENS + [7], lora_name=lora) == {"a": 10}
    assert index.prefix_lengths([5, 23, 99, 99], lora_name=lora) == {"a": 2}


def test_hash_choice_is_checked() -> None:
    with pytest.raises(ValueError, match="hash_seed"):
        block_hashing("vllm_sha256_cbor")
    with pytest.raises(ValueError, match="unknown hash_algo 'md5'"):
        KVEventsConfig(hash_algo="md5")
    with pytest.raises(ValueError, match="bigram"):
        block_hashing("vllm_sha256_cbor", hash_seed="0", bigram=True)
    with pytest.raises(ValueError, match="sender"):
        KVEventsConfig(sender="sometimes")
    cache = make_cache(full_tokens=64, page_size=2)
    recorder = EventRecorder(cache, hash_algo="vllm_sha256_cbor", hash_seed="0")
    cache.set_event_sink(recorder)
    insert_fresh(cache, [-1, 3])
    with pytest.raises(ValueError, match="token ids >= 0, got -1"):
        recorder.take_events()


def bigram_chain(tokens: list[int]) -> list[int]:
    """SGLang's bigram chain by hand: each pair (t[i], t[i+1]) as two uint32 LE, pages of
    2 pairs, first 8 digest bytes as a signed int64."""
    pairs = [struct.pack("<II", a, b) for a, b in itertools.pairwise(tokens)]
    prior, out = b"", []
    for i in range(0, len(pairs) - len(pairs) % 2, 2):
        prior = hashlib.sha256(prior + pairs[i] + pairs[i + 1]).digest()
        out.append(int.from_bytes(prior[:8], "big", signed=True))
    return out


@pytest.mark.parametrize("sender", ["thread", "inline"])
def test_eagle_bigram_pages_publish_the_bigram_chain_and_original_tokens(sender: str) -> None:
    cache = make_cache(full_tokens=64, page_size=2, is_eagle=True)
    stream = KVEventStream(cache, [loopback_publisher(sender=sender)], publish_interval_ms=0)
    tokens = [7, 8, 9, 10, 11, 12, 70000, 13, 14]  # 9 tokens: 8 bigrams, 4 pages
    try:
        key = RadixKey(tokens, is_bigram=True)
        cache.insert(InsertParams(key, alloc(cache, len(key))))
        stream.flush()
        events = decoded(stream)
    finally:
        stream.close()
    h = bigram_chain(tokens)
    assert len(h) == 4
    assert events[0][1:] == [
        BlockStored(
            h, None, tokens[:8], 2, None, "GPU", None, group_idx=0,
            kv_cache_spec_kind="full_attention",
        )
    ]  # fmt: skip
    index = KVEventIndex(2, bigram=True)
    index.apply("a", KVEventBatch(0.0, events[0], 0))  # type: ignore[arg-type]
    assert index.prefix_lengths(tokens) == {"a": 8}
    assert index.prefix_lengths(tokens[:5] + [1, 2]) == {"a": 4}


def test_cbor_integers_match_cbor2_at_every_width() -> None:
    from uniradix.hashing.events import _cbor_uints

    values = [0, 5, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1]
    data, offsets = _cbor_uints(np.array(values, dtype="<i8"))
    assert data == b"".join(cbor2.dumps(v) for v in values)
    assert offsets.tolist()[-1] == len(data)
