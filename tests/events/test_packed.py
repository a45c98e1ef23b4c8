"""The recorder's step left in arrays (`uniradix.events.packed`): its msgpack payload is
byte for byte the payload of the events it stands for, in every wire shape, on the native
path and the pure-Python one, and the native integer arrays are msgspec's bytes."""

from __future__ import annotations

import copy
import random
import threading

import msgspec
import numpy as np
import pytest

from tests.helpers import alloc, make_cache
from uniradix import EvictParams, native
from uniradix.events import WIRE_SHAPES, encode_batch
from uniradix.events import packed as packed_module
from uniradix.events.packed import StepEvents, msgpack_ints
from uniradix.events.recorder import EventRecorder
from uniradix.key import RadixKey
from uniradix.types import InsertParams

pytestmark = pytest.mark.usefixtures("python_and_native")

EDGES = [
    0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536, (1 << 31) - 1, 1 << 31, (1 << 32) - 1,
    1 << 32, (1 << 63) - 1, -1, -31, -32, -33, -127, -128, -129, -32767, -32768, -32769,
    -(1 << 31) + 1, -(1 << 31), -(1 << 31) - 1, -(1 << 63),
]  # fmt: skip


@pytest.mark.parametrize("count", [0, 1, 15, 16, 65535, 65536])
def test_integer_arrays_are_msgspecs_bytes(count: int) -> None:
    rng = np.random.default_rng(count)
    # Each size class and both sign forms: values spread over every magnitude, and the edges.
    values = rng.integers(-(1 << 63), (1 << 63) - 1, count, dtype=np.int64)
    values >>= rng.integers(0, 64, count)
    values[: len(EDGES)] = EDGES[:count]
    assert msgpack_ints(values) == msgspec.msgpack.encode(values.tolist())
    unsigned = values.view(np.uint64)  # vLLM's hashes: the last 8 bytes, unsigned
    assert msgpack_ints(unsigned) == msgspec.msgpack.encode(unsigned.tolist())
    # Views as the recorder makes them: big-endian, every 4th word, reversed.
    blob = values.astype(">i8").tobytes()
    for view in (np.frombuffer(blob, ">i8")[::4], np.frombuffer(blob, ">u8")[3::4][::-1]):
        assert msgpack_ints(view) == msgspec.msgpack.encode(view.tolist())


def test_native_integer_arrays_reject_other_arrays() -> None:
    if not native.HAVE_NATIVE:
        pytest.skip("the native path only")
    with pytest.raises(ValueError, match="int32"):
        native.msgpack_ints(np.zeros(3, dtype=np.int32))
    with pytest.raises(ValueError, match="1-D"):
        native.msgpack_ints(np.zeros((2, 2), dtype=np.int64))


CONFIGS = [
    {"page_size": 1},
    {"page_size": 4, "cache_salt": "salt"},
    {"page_size": 2, "is_eagle": True},
    {"page_size": 4, "hash_algo": "vllm_sha256_cbor", "hash_seed": "0", "cache_salt": "s"},
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_step_payloads_are_the_events_payloads(config: dict[str, object]) -> None:
    page_size = int(config["page_size"])  # type: ignore[call-overload]
    eagle = bool(config.get("is_eagle", False))
    cache = make_cache(full_tokens=256, page_size=page_size, is_eagle=eagle)
    recorder = EventRecorder(
        cache,
        cache_salt=config.get("cache_salt"),  # type: ignore[arg-type]
        hash_algo=str(config.get("hash_algo", "sglang_sha256")),
        hash_seed=config.get("hash_seed"),  # type: ignore[arg-type]
    )
    cache.set_event_sink(recorder)
    rng = random.Random(page_size)
    # Token ids of every msgpack size, sharing prefixes so that inserts split nodes.
    vocab = [0, 5, 127, 128, 300, 70000, (1 << 32) - 1]
    prefixes = [[rng.choice(vocab) for _ in range(rng.randint(1, 24))] for _ in range(4)]
    compared = 0
    for step in range(40):
        for _ in range(rng.randint(0, 3)):
            tail = [rng.choice(vocab) for _ in range(rng.randint(1, 20))]
            lora = rng.choice([None, None, "lora-a"]) if not eagle else None
            tokens = rng.choice(prefixes) + tail
            units = len(tokens) - eagle  # a bigram key has one unit less than its tokens
            tokens = tokens[: len(tokens) - units % page_size]  # whole pages only
            if len(tokens) <= eagle:
                continue
            key = RadixKey(tokens, lora, is_bigram=eagle)
            cache.evict(EvictParams(num_tokens=len(key)))
            slots = alloc(cache, len(key))
            cache.insert(InsertParams(key, slots))
        if rng.random() < 0.3:
            cache.evict(EvictParams(num_tokens=rng.randint(1, 64)))
        if step == 25:
            cache.reset()
        events = recorder.take_step()
        assert isinstance(events, StepEvents)
        as_list = list(events)  # the events themselves, made from the arrays
        for wire in WIRE_SHAPES:
            packed = encode_batch(events, 1.5, 3, wire)
            assert packed == encode_batch(as_list, 1.5, 3, wire), (wire, as_list)
            compared += bool(as_list)
    assert compared > 40


def test_the_flush_makes_no_arrays_and_a_later_reader_gets_the_steps_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`take_step` stops at the runs: nothing is packed until the step is read or encoded,
    each run once, on whichever thread. The runs hold only immutable digests and units, so
    a step encoded after the cache went on (splitting and evicting the very nodes it stored)
    and on another thread is byte for byte what it was when taken."""
    packed_runs = []
    real_pack = packed_module.pack_run
    monkeypatch.setattr(
        packed_module, "pack_run", lambda *a: packed_runs.append(a[0]) or real_pack(*a)
    )
    cache = make_cache(full_tokens=256, page_size=2)
    recorder = EventRecorder(cache)
    cache.set_event_sink(recorder)
    taken = []
    for step in range(6):
        tokens = [step % 3, 7, 8, 9] + list(range(100 + 10 * step, 106 + 10 * step))
        cache.evict(EvictParams(num_tokens=len(tokens)))
        cache.insert(InsertParams(RadixKey(tokens), alloc(cache, len(tokens))))
        if step % 2 == 0:
            cache.evict(EvictParams(num_tokens=12))
        events = recorder.take_step()
        assert packed_runs == []  # the flush packed nothing
        # What the step was when taken: a copy packed then, whose payload is fixed.
        snapshot = copy.copy(events)  # shares the runs, packs them now
        taken.append((events, {w: encode_batch(snapshot, 2.5, 0, w) for w in WIRE_SHAPES}))
        packed_runs.clear()
    num_nodes = len(list(cache.tree.nodes()))
    cache.insert(InsertParams(RadixKey([2, 7, 5, 5]), alloc(cache, 4)))
    assert len(list(cache.tree.nodes())) == num_nodes + 2  # it split the last step's leaf
    cache.evict(EvictParams(num_tokens=256))  # and removes every node the steps stored
    recorder.take_step()
    payloads: dict[int, dict[str, bytes]] = {}

    def encode_all() -> None:
        for i, (events, _) in enumerate(taken):
            payloads[i] = {w: encode_batch(events, 2.5, 0, w) for w in WIRE_SHAPES}

    thread = threading.Thread(target=encode_all)
    thread.start()
    thread.join()
    assert [payloads[i] for i in range(len(taken))] == [expected for _, expected in taken]
    num_runs = sum(len(events) - events.cleared for events, _ in taken)
    assert len(packed_runs) == num_runs
    kinds = {type(e).__name__ for events, _ in taken for e in events}
    assert kinds == {"BlockStored", "BlockRemoved"}
    assert len(packed_runs) == num_runs  # reading the events reused the packed runs
