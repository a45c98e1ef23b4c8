"""L3 in the event stream of a hybrid cache: the windows and states a backup stored are
published as KV-cache groups on `DISK` beside the full pages, so the index's resumable
length on storage is the boundary an L3 prefetch would fetch to (`AuxStorage.plan`, the
store itself as the oracle), and device < host < storage widen it in that order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from uniradix import RadixKey
from uniradix.events import BlockStored
from uniradix.events.index import KVEventIndex
from uniradix.events.types import KVEventBatch
from uniradix.sim.cluster import Cluster
from uniradix.sim.replay import ReplayOptions
from uniradix.sim.router import CacheAware
from uniradix.storage.file_backend import FileBackend
from uniradix.tiers.storage_tier import StorageTier

MEDIA = ("GPU", "CPU_PINNED", "DISK")


def _run(directory: Path, config: str) -> tuple[Cluster, list[KVEventBatch]]:
    options = ReplayOptions.of(
        workload="multi_turn",
        config=config,
        page_size=4,
        full_tokens=4096,
        swa_tokens=512,
        sliding_window=32,
        mamba_slots=24,
        host_tokens=4096,
        storage_backend=FileBackend(directory),
        prefetch_threshold=8,
        max_requests=40,
        check_invariants=True,
    )
    cluster = Cluster(options, 1, "round-robin")
    seen: list[KVEventBatch] = []
    pub = cluster.instances[0].stream.publishers[0]
    original = pub.publish

    def publish(events):  # type: ignore[no-untyped-def]
        seen.append(KVEventBatch(0.0, list(events), 0))
        return original(events)

    pub.publish = publish  # type: ignore[method-assign]
    cluster.run()
    return cluster, seen


def _l3_resumable(storage: StorageTier, tokens: list[int]) -> int:
    """Tokens of `tokens` an L3 prefetch from an empty tree would resume to."""
    keys = storage.keyspace.keys_for(RadixKey(tokens))
    hi = storage.backend.batch_exists(keys)
    if hi == 0 or storage.aux is None:
        return hi * storage.page_size
    plan = storage.aux.plan(keys, 0, hi)
    return 0 if plan is None else plan.boundary * storage.page_size


@pytest.mark.parametrize("config", ["swa", "mamba", "hybrid"])
def test_index_on_disk_resumes_where_l3_prefetch_would(tmp_path: Path, config: str) -> None:
    cluster, batches = _run(tmp_path, config)
    inst = cluster.instances[0]
    storage = inst.cache.host_tier.storage
    assert storage is not None
    disk = {
        (e.group_idx, e.kv_cache_spec_kind)
        for b in batches
        for e in b.events
        if isinstance(e, BlockStored) and e.medium == "DISK"
    }
    assert len(disk) == len(inst.cache.components), disk  # every group reached L3
    index = cluster.index
    short = 0  # prompts whose stored full pages outrun what L3 can resume
    for spec in cluster.specs:
        tokens = spec.prompt.token_ids().tolist()
        want = _l3_resumable(storage, tokens)
        full = index.prefix_lengths(tokens, medium="DISK")[inst.name]
        assert index.resumable_lengths(tokens, ("DISK",))[inst.name] == want <= full
        lengths = [index.resumable_lengths(tokens, MEDIA[: k + 1])[inst.name] for k in range(3)]
        assert lengths[0] <= lengths[1] <= lengths[2] and want <= lengths[2]
        short += want < full
    # An SWA window is stored with each node's end, where a Mamba state may be missing.
    assert short or config == "swa"


def test_a_fresh_index_reads_vllm_media_names() -> None:
    """vLLM's `CPU` and `STORAGE` (and SGLang's `EXTERNAL`) are the host and storage media."""
    index = KVEventIndex(4)
    tokens = list(range(12))
    h = index.page_hashes(tokens)
    index.apply("a", KVEventBatch(0.0, [
        BlockStored(h[:1], None, tokens[:4], 4, None, "GPU", None),
        BlockStored(h[1:2], h[0], tokens[4:8], 4, None, "CPU", None),
        BlockStored(h[2:], h[1], tokens[8:], 4, None, "STORAGE", None),
        BlockStored(h[2:], h[1], tokens[8:], 4, None, "EXTERNAL", None),
    ]))  # fmt: skip
    assert [index.resumable_lengths(tokens, MEDIA[: k + 1])["a"] for k in range(3)] == [4, 8, 12]
    assert index.blocks("a", "DISK") == {h[2]}


def test_cache_aware_router_prefers_device_then_host_then_storage() -> None:
    index = KVEventIndex(4)
    tokens = list(range(16))
    h = index.page_hashes(tokens)
    names = ["on-disk", "on-host", "on-device"]
    for name, medium in zip(names, MEDIA[::-1], strict=True):
        stored = BlockStored(h, None, tokens, 4, None, medium, None)
        index.apply(name, KVEventBatch(0.0, [stored]))
    router = CacheAware(index, names, recent=0)
    prompt = np.asarray(tokens + [99])
    assert router.choose(prompt, [0, 0, 0]) == 2
    assert router.choose(prompt, [0, 0, 99]) == 1  # the device one is over the load slack
    assert router.choose(prompt, [0, 99, 99]) == 0
