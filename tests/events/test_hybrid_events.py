"""KV-cache groups: a hybrid cache publishes its SWA windows and Mamba states as vLLM's
hybrid groups (`group_idx`, `kv_cache_spec_kind`, `kv_cache_spec_sliding_window`) on GPU
and CPU_PINNED, the index built from the stream equals each cache's content per group,
`components="full"` keeps the full-only stream, and a decoder written from vLLM's newest
`kv_events.py` field list reads the events."""

from __future__ import annotations

import json
from dataclasses import replace

import msgspec
import pytest

from tests.events.oracle import cached_hashes
from uniradix import UnifiedRadixCache
from uniradix.cli import main
from uniradix.events import BlockRemoved, BlockStored, KVEventsConfig, decode_batch, encode_batch
from uniradix.events.groups import KIND_MAMBA, KIND_SWA, publishes_groups
from uniradix.events.types import KVEvent
from uniradix.hashing.page import digest_to_int64, page_digests
from uniradix.sim.cluster import Cluster
from uniradix.sim.replay import ReplayOptions
from uniradix.types import ComponentType

OPTIONS = ReplayOptions.of(
    workload="multi_turn",
    page_size=4,
    full_tokens=8192,
    swa_tokens=512,
    sliding_window=64,
    mamba_slots=24,
    max_requests=40,
    check_invariants=True,
)


KINDS = {"swa": [KIND_SWA], "mamba": [KIND_MAMBA], "hybrid": [KIND_SWA, KIND_MAMBA]}


def group_oracle(cache: UnifiedRadixCache, index: int, mamba: bool, medium: str) -> set[int]:
    """Published hashes of the pages component `index` holds on `medium`, hashed from the
    root in one go (a Mamba state: its node's last page)."""
    full = cached_hashes(cache, medium)
    out: set[int] = set()
    ps = cache.page_size
    for node in cache.tree.nodes():
        d = node.data[index]
        if (d.value if medium == "GPU" else d.host_value) is None:
            continue
        units = b"".join(n.key for n in reversed(list(cache.tree.path_to_root(node))))
        pages = [digest_to_int64(x) for x in page_digests(units, ps)][-(node.num_tokens // ps) :]
        out.update(h for h in (pages[-1:] if mamba else pages) if h in full)
    return out


def _capture(cluster: Cluster) -> list[KVEvent]:
    """Every event instance 0 hands its index, in order."""
    seen: list[KVEvent] = []
    pub = cluster.instances[0].stream.publishers[0]
    original = pub.publish

    def publish(events):  # type: ignore[no-untyped-def]
        seen.extend(events)
        return original(events)

    pub.publish = publish  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("config", ["swa", "mamba", "hybrid"])
def test_index_groups_equal_each_cache_per_component(config: str) -> None:
    cluster = Cluster(replace(OPTIONS, config=config), 2, "cache-aware")
    events = _capture(cluster)
    cluster.run()
    kinds = {e.kv_cache_spec_kind for e in events if isinstance(e, BlockStored)}
    assert kinds == {"full_attention", *KINDS[config]}
    removed_groups = {e.group_idx for e in events if isinstance(e, BlockRemoved)}
    assert removed_groups - {0}, "some window or state left the device"
    for inst in cluster.instances:
        cache = inst.cache
        assert cluster.index.blocks(inst.name) == cached_hashes(cache)
        for c in cache.components[1:]:
            mamba = c.component_type == ComponentType.MAMBA
            want = group_oracle(cache, c.index, mamba, "GPU")
            assert cluster.index.blocks(inst.name, group=c.index) == want
            assert want < cached_hashes(cache)  # tombstones: fewer than the full pages


def test_swa_stores_carry_the_window_and_chain_from_the_page_before() -> None:
    cluster = Cluster(replace(OPTIONS, config="swa", max_requests=15), 1, "round-robin")
    events = _capture(cluster)
    cluster.run()
    stores = [e for e in events if isinstance(e, BlockStored) and e.kv_cache_spec_kind == KIND_SWA]
    assert stores and all(e.kv_cache_spec_sliding_window == 64 for e in stores)
    assert all(e.group_idx == 1 and e.medium == "GPU" for e in stores)
    full_parents = {h for e in events if isinstance(e, BlockStored) for h in e.block_hashes}
    for e in stores:
        assert len(e.token_ids) == len(e.block_hashes) * 4
        assert e.parent_block_hash is None or e.parent_block_hash in full_parents


def test_components_full_keeps_the_full_only_stream() -> None:
    config = KVEventsConfig(publisher="null", components="full")
    cluster = Cluster(replace(OPTIONS, config="hybrid"), 1, "round-robin", config)
    events = _capture(cluster)
    cluster.run()
    assert events
    for e in events:
        assert getattr(e, "group_idx", 0) == 0
        assert getattr(e, "kv_cache_spec_kind", "full_attention") == "full_attention"


def test_groups_rule_per_components_and_wire() -> None:
    assert publishes_groups("auto", 2) and not publishes_groups("auto", 0)
    assert not publishes_groups("auto", 2, "sglang-array") and publishes_groups("all", 0)
    assert not publishes_groups("full", 2)
    with pytest.raises(ValueError, match="needs a wire shape with group fields"):
        KVEventsConfig(components="all", wire="sglang-array")
    with pytest.raises(ValueError, match="unknown components 'swa'"):
        KVEventsConfig(components="swa")


def test_host_tier_publishes_groups_on_cpu_pinned() -> None:
    options = OPTIONS.updated(config="hybrid", host_tokens=16384, max_requests=30)
    cluster = Cluster(options, 1, "round-robin")
    events = _capture(cluster)
    cluster.run()
    host = [e for e in events if isinstance(e, BlockStored) and e.medium == "CPU_PINNED"]
    assert {e.kv_cache_spec_kind for e in host} >= {"full_attention", KIND_SWA, KIND_MAMBA}
    inst = cluster.instances[0]
    for c in inst.cache.components[1:]:
        mamba = c.component_type == ComponentType.MAMBA
        want = group_oracle(inst.cache, c.index, mamba, "CPU_PINNED")
        assert cluster.index.blocks(inst.name, "CPU_PINNED", group=c.index) == want


# vLLM's newest `BlockStored` / `BlockRemoved` (tagged maps since vllm#42892, hybrid fields
# from vllm#37688 / #40984), written from the field list in its `kv_events.py`: the vllm
# wheel is not installed here, so this schema stands in for its classes.
class VllmBlockStored(msgspec.Struct, tag="BlockStored"):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[object] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class VllmBlockRemoved(msgspec.Struct, tag="BlockRemoved"):
    block_hashes: list[int | bytes]
    medium: str | None
    group_idx: int | None = None


class VllmAllBlocksCleared(msgspec.Struct, tag="AllBlocksCleared"):
    pass


class VllmBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[VllmBlockStored | VllmBlockRemoved | VllmAllBlocksCleared]
    data_parallel_rank: int | None = None


def test_vllm_schema_and_array_shapes_decode_group_events() -> None:
    cluster = Cluster(replace(OPTIONS, config="hybrid", max_requests=20), 1, "round-robin")
    events = _capture(cluster)
    cluster.run()
    payload = encode_batch(events, 1.0, 0, "map")
    theirs = msgspec.msgpack.decode(payload, type=VllmBatch)
    groups = {(e.group_idx, e.kv_cache_spec_kind, e.kv_cache_spec_sliding_window)
              for e in theirs.events if isinstance(e, VllmBlockStored)}  # fmt: skip
    assert groups == {(0, "full_attention", None), (1, KIND_SWA, 64), (2, KIND_MAMBA, None)}
    for wire in ("map", "vllm-array"):
        back = decode_batch(encode_batch(events, 1.0, 0, wire)).events
        assert [_identity(e) for e in back] == [_identity(e) for e in events]


def _identity(event: KVEvent) -> tuple[str, list[int] | None, int]:
    """What a router keys on: kind of event, hashes, group (the full group's index 0 is
    left out of positional shapes)."""
    hashes = getattr(event, "block_hashes", None)
    return type(event).__name__, hashes, getattr(event, "group_idx", None) or 0


def test_cli_components_flag_and_prediction_fields(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", "--json", "--no-progress", "--max-requests", "20", "--config", "hybrid"]
    argv += ["--instances", "2", "--router", "cache-aware", "--kv-events", "tcp://127.0.0.1:9"]
    rates = {}
    for components in ("auto", "full"):
        assert main([*argv, "--kv-events-components", components]) == 0
        summary = json.loads(capsys.readouterr().out)
        for inst in summary["instances"]:
            assert set(inst) >= {"predicted_hit_tokens", "at_match_hit_tokens", "hit_tokens"}
        rates[components] = summary["at_match_hit_tokens"], summary["full_only_hit_tokens"]
    assert rates["auto"][0] <= rates["auto"][1] and rates["full"][0] == rates["full"][1]
