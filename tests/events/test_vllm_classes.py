"""Our batches decoded by vLLM 0.33.0's own classes (`vllm/distributed/kv_events.py`,
loaded by `tests/events/vllm_classes.py`), and vLLM's own publisher feeding our index.
Skipped, naming the file, when `scripts/setup_vllm_events.sh` could not fetch it."""

from __future__ import annotations

import time
import types
from typing import Any

import msgspec
import pytest
import zmq

from tests.events.vllm_classes import MISSING, load_vllm_kv_events
from uniradix.events import BlockStored, KVEventBatch, decode_batch, encode_batch
from uniradix.events.index import KVEventIndex
from uniradix.events.replay_client import fetch_replay
from uniradix.events.types import KVEvent
from uniradix.sim.cluster import Cluster
from uniradix.sim.replay import ReplayOptions

OPTIONS = ReplayOptions.of(
    workload="multi_turn",
    config="hybrid",
    page_size=4,
    full_tokens=8192,
    swa_tokens=512,
    sliding_window=64,
    mamba_slots=24,
    host_tokens=16384,
    max_requests=30,
    check_invariants=True,
)


@pytest.fixture(scope="module")
def vllm() -> types.ModuleType:
    try:
        return load_vllm_kv_events()
    except FileNotFoundError:
        pytest.skip(MISSING)


def _batches(cluster: Cluster) -> list[list[KVEvent]]:
    """Every batch instance 0 publishes, as handed to its publisher."""
    seen: list[list[KVEvent]] = []
    pub = cluster.instances[0].stream.publishers[0]
    original = pub.publish

    def publish(events):  # type: ignore[no-untyped-def]
        seen.append(events)
        return original(events)

    pub.publish = publish  # type: ignore[method-assign]
    return seen


_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium")
_FIELDS += ("lora_name", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window")


def _fields(event: Any) -> tuple[Any, ...]:
    return (type(event).__name__, *(getattr(event, f, None) for f in _FIELDS))


def test_vllm_classes_decode_our_map_batches(vllm: types.ModuleType) -> None:
    cluster = Cluster(OPTIONS, 1, "round-robin")
    batches = _batches(cluster)
    cluster.run()
    decoder = msgspec.msgpack.Decoder(vllm.KVEventBatch)  # what vLLM's consumers build
    kinds, media = set(), set()
    for i, batch in enumerate(batches):
        payload = encode_batch(batch, float(i), 0, "map")
        theirs = decoder.decode(payload)
        assert theirs.ts == float(i) and theirs.data_parallel_rank == 0
        assert [_fields(e) for e in theirs.events] == [_fields(e) for e in batch]
        assert [_fields(e) for e in decode_batch(payload).events] == [_fields(e) for e in batch]
        for e in theirs.events:
            if isinstance(e, vllm.BlockStored):
                assert len(e.token_ids) == len(e.block_hashes) * e.block_size
                kinds.add((e.group_idx, e.kv_cache_spec_kind, e.kv_cache_spec_sliding_window))
                media.add(e.medium)
    assert kinds == {(0, "full_attention", None), (1, "sliding_window", 64), (2, "mamba", None)}
    assert media == {"GPU", "CPU_PINNED"}
    assert isinstance(
        decoder.decode(encode_batch(batches[0], 0.0, 0)).events[0], vllm.AllBlocksCleared
    )


def _vllm_stored(vllm: types.ModuleType, hashes: list[int], parent: int | None, **kw: Any) -> Any:
    """A `BlockStored` as vLLM 0.33 builds it, with its newest fields set."""
    tokens = list(range(len(hashes) * 4))
    return vllm.BlockStored(
        hashes, parent, tokens, 4, None, kw.pop("medium", "GPU"), None, locality="LOCAL",
        ownership=None, session_id="s1", lookahead_token_ids=[[7]] * len(hashes), **kw,
    )  # fmt: skip


def test_vllm_publisher_feeds_our_index(vllm: types.ModuleType) -> None:
    """vLLM's own `ZmqEventPublisher` (its sender thread, replay ROUTER, `tcp://*:0` bind)
    to our `KVEventIndex`: its newest fields are read past, its `CPU` medium is the host,
    and the batches sent before the subscription took effect come from its replay ring."""
    pub = vllm.ZmqEventPublisher(0, endpoint="tcp://*:0", replay_endpoint="tcp://*:0")
    config = pub.get_publisher_config()
    index = KVEventIndex(4)
    tokens = list(range(100, 116))  # four pages
    h = index.page_hashes(tokens)
    batches = [
        [vllm.AllBlocksCleared(), _vllm_stored(vllm, h[:2], None, group_idx=0)],
        [_vllm_stored(vllm, h[2:], h[1], group_idx=0, kv_cache_spec_kind="full_attention")],
        [_vllm_stored(vllm, h[3:], h[2], medium="CPU", group_idx=0)],
        [vllm.BlockRemoved(h[3:], "GPU", group_idx=0, locality="LOCAL")],
    ]
    try:
        pub.publish(vllm.KVEventBatch(time.time(), batches[0]))
        deadline = time.monotonic() + 5
        ctx = zmq.Context.instance()
        while fetch_replay(ctx, config.replay_endpoint, 0, 1) is None:
            assert time.monotonic() < deadline, "vLLM's publisher sent nothing"
        # The first batch went out before anyone subscribed: the index finds a gap.
        index.subscribe("vllm-0", config.endpoint, config.replay_endpoint)
        time.sleep(0.2)  # the SUB connects
        for events in batches[1:]:
            pub.publish(vllm.KVEventBatch(time.time(), events))
        while index.stats.batches < len(batches) and time.monotonic() < deadline:
            index.poll(50)
    finally:
        pub.shutdown()
        index.close()
    assert index.stats.batches == len(batches) and index.stats.replayed >= 1
    assert index.prefix_lengths(tokens) == {"vllm-0": 12}
    assert index.resumable_lengths(tokens, ("GPU", "CPU_PINNED")) == {"vllm-0": 16}
    assert index.blocks("vllm-0", "CPU_PINNED") == {h[3]}


def test_our_decoder_reads_vllm_encoded_batches(vllm: types.ModuleType) -> None:
    """vLLM's bytes (fields we do not publish included) decode into our structs."""
    stored = _vllm_stored(vllm, [11, 12], None, group_idx=1, kv_cache_spec_kind="sliding_window",
                          kv_cache_spec_sliding_window=64)  # fmt: skip
    payload = msgspec.msgpack.encode(vllm.KVEventBatch(2.0, [stored], 3))
    ours = decode_batch(payload)
    assert ours == KVEventBatch(2.0, [BlockStored([11, 12], None, list(range(8)), 4, None, "GPU",
        None, group_idx=1, kv_cache_spec_kind="sliding_window",
        kv_cache_spec_sliding_window=64)], 3)  # fmt: skip
