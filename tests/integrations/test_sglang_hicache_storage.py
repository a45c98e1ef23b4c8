"""SGLang's L3 storage (HiCache storage backends) on the uniradix core and on SGLang's Python
core: SGLang's own `UnifiedRadixCache`, `HybridCacheController` and storage threads (see
`sglang_hicache`) play the same request stream on both, with an L3 backend attached: SGLang's
file backend, and `UniradixHiCacheStorage` on a uniradix file store loaded by SGLang's
dynamic backend factory. Host pressure evicts host copies that storage still holds, so later
requests prefetch them from storage (`prefetch_from_storage`, `insert_host` with storage's
page hashes) and load them back; every finished host backup is written to storage
(`build_storage_backup_spec`). Compared call by call: the results, the page hashes, the KV
the load-backs bring back (checked against what the requests wrote), the final tree and the
page keys written to storage."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from array import array
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
import torch

from benchmarks.redis_servers import RedisProcess
from tests.integrations.sglang_env import load_sglang

load_sglang(kits=True)

from sglang.srt.environ import envs  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.cpp_utils.native_hash import get_native_hash  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402
from sglang.srt.runtime_context import get_parallel  # noqa: E402

from tests.integrations.sglang_hicache import (  # noqa: E402
    build_hicache_cache,
    cpu_hicache,
    load_back,
    prefetch_from_storage,
    settle_storage,
)
from tests.integrations.test_sglang_conformance import build  # noqa: E402
from tests.integrations.test_sglang_hicache import (  # noqa: E402
    FULL_CONFIGS,
    key_buffer,
    marker,
    play_hicache,
    tree_state,
)

BACKENDS = ("file", "uniradix")


def storage_args(backend: str, directory: Path, page_size: int) -> dict[str, object]:
    """SGLang's server arguments attaching `backend` on `directory` (prefetch from one page
    on); `uniradix-redis` and `uniradix-cluster`: `UniradixHiCacheStorage` on the Redis or
    the Redis Cluster whose URL is `UNIRADIX_TEST_REDIS`."""
    extra: dict[str, object] = {"prefetch_threshold": page_size}
    name = backend
    if backend.startswith("uniradix"):  # `--hicache-storage-backend dynamic`, as a user would
        name = "dynamic"
        redis = backend != "uniradix"
        extra.update(
            backend_name="uniradix",
            module_path="uniradix.integrations.sglang.storage",
            class_name="UniradixHiCacheStorage",
            url=os.environ["UNIRADIX_TEST_REDIS"] if redis else f"file://{directory}",
            model_fingerprint="kit-model",  # the kit's server arguments name no model
        )
    return {
        "hicache_storage_backend": name,
        "hicache_storage_backend_extra_config": json.dumps(extra),
        "hicache_storage_prefetch_policy": "wait_complete",
        "hicache_ratio": 1.0,
    }


@contextlib.contextmanager
def storage_cache(cfg, core: str, backend: str, directory: Path, policy: str) -> Iterator[tuple]:
    """The kit's cache of `cfg` on `core`, HiCache on, `backend` attached on `directory`."""
    args = storage_args(backend, directory, cfg.page_size)
    # SGLang builds its native page hash (a C++ extension) on first use, which can take
    # minutes: here, not inside a prefetch thread the test waits for with a deadline.
    get_native_hash(array("q", [1]), None, 1)
    with (
        cpu_hicache(),
        get_parallel().override(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1),
        envs.SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR.override(str(directory)),
    ):
        cache, allocator, _ = build_hicache_cache(cfg, core, policy, storage=args)
        controller = cache.cache_controller
        try:
            assert cache.enable_storage and controller.storage_backend is not None
            cache.load_back_threshold = cfg.page_size
            # Plain CPU memory here (see `cpu_hicache`): SGLang's file backend reads a page
            # into a scratch page it would pin.
            controller.storage_host_pool.pin_memory = False
            # The kit's host pool is the device pool's size, which leaves no prefetch room.
            controller.prefetch_capacity_limit = max(
                controller.prefetch_capacity_limit, controller.mem_pool_host.size
            )
            yield cache, allocator
        finally:
            controller._stop_storage_threads()
            cache.release_host_resources()


def run(cfg, core: str, backend: str, directory: Path, n: int) -> tuple:
    """The stream on `core`; the trace, the final tree and hashes, and the page keys SGLang
    wrote to storage in order, each checked to be in the store."""
    with storage_cache(cfg, core, backend, directory, "write_through") as (cache, allocator):
        controller = cache.cache_controller
        written: list[str] = []

        def write_storage(host_indices, token_ids, hash_value, *args, **kwargs):
            written.extend(hash_value)
            return real_write(host_indices, token_ids, hash_value, *args, **kwargs)

        real_write = controller.write_storage
        with mock.patch.object(controller, "write_storage", write_storage):
            trace = play_hicache(cache, allocator, cfg.page_size, n, seed=11, l3=True)
        store = controller.storage_backend
        assert all(store.exists(key) for key in written), "a written page is not in the store"
        return trace, tree_state(cache), hash_state(cache), written


def hash_state(cache) -> list[tuple]:
    """Every node's tokens with its page hashes and its ancestors' (storage's keys)."""
    core, root = cache.tree_core, cache.root_node_handle()
    return sorted(
        (
            tuple(core.get_node_token_ids(node)),
            tuple(core.get_hash_values(node)),
            core.get_last_hash_value(node),
            tuple(core.get_prefix_hash_values(node)),
        )
        for node in core.get_all_node_ids()
        if node != root
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cfg", FULL_CONFIGS, ids=lambda c: c.label)
def test_l3_storage_plays_the_same_on_both_cores(cfg, backend, tmp_path):
    """Write-through: the device part of a path is backed up, so a match ends where a
    prefetch may start (SGLang's scheduler prefetches below a backed-up node or the root)."""
    n = 300 if cfg.page_size == 1 else 80
    runs = {}
    for core in ("python", "uniradix"):
        runs[core] = run(cfg, core, backend, tmp_path / core, n)
    trace, tree, hashes, written = runs["python"]
    played = [s for s in trace if s[0] != "skip"]
    assert all(s[3] for s in played), "a prefix's KV is not what its requests wrote"
    assert any(s[13] > 0 for s in played), "nothing was prefetched from storage"
    assert any(s[1] and s[2] for s in played), "no load-back"
    assert written and all(h for _, h, _, _ in hashes), "nothing stored / an unhashed node"
    assert runs["uniradix"][0] == trace
    assert runs["uniradix"][1] == tree
    assert runs["uniradix"][2] == hashes
    assert runs["uniradix"][3] == written


def test_l3_storage_on_redis_plays_the_same_on_both_cores(tmp_path):
    """The same stream with `UniradixHiCacheStorage` on a real Redis (emptied before each
    core), on the kit's FULL page-4 config."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server missing: scripts/setup.sh installs it")
    cfg = next(c for c in FULL_CONFIGS if c.label == "FULL_ps4")
    server = RedisProcess(tmp_path / "redis").start()
    runs = {}
    try:
        url = f"redis://127.0.0.1:{server.port}/0"
        with mock.patch.dict(os.environ, {"UNIRADIX_TEST_REDIS": url}):
            for core in ("python", "uniradix"):
                server.client().flushall()
                runs[core] = run(cfg, core, "uniradix-redis", tmp_path / core, 80)
    finally:
        server.stop()
    assert any(s[13] > 0 for s in runs["python"][0] if s[0] != "skip"), "no prefetch"
    assert runs["uniradix"] == runs["python"]


def seqs(page_size: int) -> tuple[list[int], list[int], list[int]]:
    prefix = list(range(100, 100 + 2 * page_size))
    return prefix, prefix + list(range(7, 7 + 3 * page_size)), list(range(50, 50 + page_size))


def build_and_insert(cfg, core: str, storage_on: str) -> object:
    """`storage_on`: "start" (hashing from the first insert), "attach" (SGLang's attach of a
    backend to a live tree: backfill, then storage on, then more inserts) or "never"."""
    cache = build(cfg, core)
    allocator = cache.token_to_kv_pool_allocator
    prefix, longer, other = seqs(cfg.page_size)
    if storage_on == "start":
        cache.enable_storage = True

    def insert(tokens: list[int]) -> None:
        value = allocator.alloc(len(tokens))
        cache.insert(InsertParams(key=RadixKey(array("q", tokens)), value=value))

    insert(prefix)
    insert(other)
    if storage_on == "attach":
        filled = cache.tree_core.backfill_missing_hash_values()
        assert filled == 2
        cache.enable_storage = True
    insert(longer)  # a new leaf below the hashed prefix
    insert(prefix[: cfg.page_size])  # a split: the hashes are divided
    return cache


@pytest.mark.parametrize("cfg", FULL_CONFIGS, ids=lambda c: c.label)
def test_page_hashes_are_the_same_on_both_cores(cfg):
    """Storage on from the start, attached to a live tree (SGLang's backfill) and never on:
    the same hashes on every node on both cores; attached late, the chain is the one storage
    on from the start gives (no chain restarted mid-sequence)."""
    states = {}
    for storage_on in ("start", "attach", "never"):
        for core in ("python", "uniradix"):
            states[storage_on, core] = hash_state(build_and_insert(cfg, core, storage_on))
        assert states[storage_on, "uniradix"] == states[storage_on, "python"], storage_on
    assert states["attach", "python"] == states["start", "python"]
    assert all(row[1] for row in states["start", "python"])
    assert not any(row[1] for row in states["never", "python"])
    assert any(row[3] for row in states["start", "python"]), "no node below a hashed parent"


def produce(cfg, core: str, backend: str, directory: Path, tokens: list[int]) -> None:
    """A request's KV written, inserted, backed up to the host and from there to storage."""
    with storage_cache(cfg, core, backend, directory, "write_through") as (cache, allocator):
        keys, value = key_buffer(allocator), allocator.alloc(len(tokens))
        keys[value] = marker(tokens)[:, None, None].to(keys.dtype)
        cache.insert(InsertParams(key=RadixKey(array("q", tokens)), value=value))
        settle_storage(cache)  # the host backup is acked here: its storage write starts
        settle_storage(cache)


def consume(cfg, core: str, backend: str, directory: Path, tokens: list[int]) -> tuple:
    """A fresh cache serving the same request: prefetched from storage, loaded back."""
    with storage_cache(cfg, core, backend, directory, "write_through") as (cache, allocator):
        key = RadixKey(array("q", tokens))
        first = cache.match_prefix(MatchPrefixParams(key=key))
        fetched = prefetch_from_storage(cache, "consumer", first, tokens)
        loaded = load_back(cache, cache.match_prefix(MatchPrefixParams(key=key)).best_match_node)
        m = cache.match_prefix(MatchPrefixParams(key=key))
        prefix = cache.path_device_indices(m.last_device_node)[: m.device_prefix_len]
        kv = key_buffer(allocator)[prefix][:, 0, 0].float()
        kv_ok = torch.equal(kv, marker(tokens[: len(prefix)]))
        return first.device_prefix_len, fetched, loaded, m.device_prefix_len, kv_ok


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("producer", ["python", "uniradix"])
def test_each_core_reads_what_the_other_wrote_to_storage(producer, backend, tmp_path):
    """The storage keys are SGLang's on both cores: a cache on either core serves, from
    storage, the KV a cache on the other wrote there (the request's own KV comes back)."""
    cfg = next(c for c in FULL_CONFIGS if c.label == "FULL_ps4")
    tokens = list(range(300, 300 + 5 * cfg.page_size))
    produce(cfg, producer, backend, tmp_path, tokens)
    for consumer in ("python", "uniradix"):
        got = consume(cfg, consumer, backend, tmp_path, tokens)
        assert got == (0, len(tokens), True, len(tokens), True), (consumer, got)
