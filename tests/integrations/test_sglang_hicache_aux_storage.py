"""SGLang's L3 storage of FULL+SWA, FULL+Mamba and FULL+SWA+Mamba caches on the uniradix core
and on SGLang's Python core: SGLang's own `UnifiedRadixCache`, `HybridCacheController` and
storage threads play the same requests on both with an L3 backend attached: SGLang's file
backend, or `UniradixHiCacheStorage` (SGLang's dynamic factory) on a file store, on a real
Redis or on a real 3-master Redis Cluster; under write-through, write-back and the selective
write-through. Every request writes its KV (full and sliding-window layers) and its final
state; each backup to storage writes the node's SWA host pages and state copy under its page
hashes (`build_storage_backup_spec`): under write-through after each insert, under the
selective write-through after the insert that hits a node a second time (a later request
extending it, or the second of two identical requests arriving at once), under write-back
once the device eviction has backed the node up to the host. Once both tiers are emptied,
each request is matched,
prefetched from storage (the window and the state staged by `build_hicache_transfers`,
committed onto the prefetched path by `commit_hicache_transfers`), loaded back and matched
again: the KV, the last window's SWA KV and the state it finds are checked against what the
requests wrote, so they came back through storage. Compared call by call with the tree
after every request."""

from __future__ import annotations

import itertools
import os
import random
import shutil
from array import array
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
import torch

from benchmarks.redis_servers import RedisProcess, start_cluster
from tests.integrations.sglang_env import load_sglang

load_sglang(kits=True)

from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.hicache_storage import PoolName  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402

from tests.integrations.sglang_hicache import (  # noqa: E402
    component_tree_state,
    load_back,
    prefetch_from_storage,
    settle_storage,
)
from tests.integrations.sglang_hybrid_stream import _alloc  # noqa: E402
from tests.integrations.sglang_mamba_hicache import ALL, MAMBA, StateCheck  # noqa: E402
from tests.integrations.sglang_swa_hicache import SWA, KvCheck  # noqa: E402
from tests.integrations.test_sglang_hicache_mamba import (  # noqa: E402
    MAMBA_CONFIGS,
    SWA_MAMBA_CONFIGS,
)
from tests.integrations.test_sglang_hicache_storage import storage_cache  # noqa: E402
from tests.integrations.test_sglang_hicache_swa import SWA_CONFIGS  # noqa: E402


def requests(page_size: int, n: int, seed: int) -> list[list[int]]:
    """Whole pages; half extend an earlier request, so prefetches start below host nodes."""
    rng = random.Random(seed)
    pages = lambda k: [rng.randrange(1000) for _ in range(page_size * k)]  # noqa: E731
    out: list[list[int]] = []
    for _ in range(n):
        base = rng.choice(out) if out and rng.random() < 0.5 else []
        out.append(base + pages(rng.randint(1, 3)))
    return out


def play(cache, allocator, cfg, n: int, seed: int, twins: bool = False) -> list[tuple]:
    """`twins`: every other request arrives twice at once (both matched before either
    inserts), so its second insert walks the first's new node: a second hit, which the
    selective write-through policy waits for before backing a node up."""
    # Plain CPU memory (see `cpu_hicache`): SGLang's file backend reads an SWA or Mamba page
    # into a scratch page it would pin.
    for name in (PoolName.SWA, PoolName.MAMBA):
        if name in cache.host_pool_group.entry_map:
            cache.host_pool_group.get_pool(name).pin_memory = False
    mamba = MAMBA in cfg.components
    swa = KvCheck(cache, cfg) if SWA in cfg.components else None
    check = StateCheck(cache, cfg) if mamba else None
    states = cache.req_to_token_pool.mamba_allocator if mamba else None
    out: list[tuple] = []

    def tree():  # which tiers hold each node's KV, SWA window and state, and their locks
        return component_tree_state(cache, cfg.components)

    def match(tokens):
        m = cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens))))
        figures = m.device_prefix_len, m.host_hit_length, m.mamba_host_hit_length
        return m, (*figures, m.swa_host_hit_length)

    def arrive(tokens):  # matched, its KV and state written, its prefix locked
        m, figures = match(tokens)
        done = m.device_prefix_len
        prefix = cache.path_device_indices(m.last_device_node)[:done]
        slots = _alloc(allocator, len(tokens) - done, cfg.page_size)
        assert slots is not None, "the kit's pools hold every request"
        state = states.alloc(1) if states is not None else None
        if check is not None:
            check.write(slots, state, tokens, done)
        if swa is not None:
            swa.write(slots, tokens[done:])
        key = RadixKey(array("q", tokens))
        value = torch.cat([prefix, slots])
        params = InsertParams(key=key, value=value, prev_prefix_len=done, mamba_value=state,
                              swa_branching_seqlen=m.swa_branching_seqlen)  # fmt: skip
        return figures, params, cache.lock(m.last_device_node)

    def finish(figures, params, lock):
        r = cache.insert(params)
        cache.unlock(lock)
        if r.mamba_exist and states is not None:
            states.free(params.mamba_value)
        settle_storage(cache)  # the backups and the storage writes they start
        out.append(("insert", figures, r.prefix_len, tree()))

    stream = requests(cfg.page_size, n, seed)
    for i, tokens in enumerate(stream):
        arrived = [arrive(tokens) for _ in range(2 if twins and i % 2 == 0 else 1)]
        for request in arrived:
            finish(*request)
    evicted = cache.evict(EvictParams(num_tokens=ALL, mamba_num=ALL))
    settle_storage(cache)  # write-back: the evicted nodes' host backups go to storage here
    host = cache.evict_host(ALL, MAMBA), cache.evict_host(ALL)
    out.append(("evict both tiers", evicted.num_tokens_evicted, host, tree()))
    for i, tokens in enumerate(stream):
        m, before = match(tokens)
        fetched = prefetch_from_storage(cache, f"r{i}", m, tokens)
        m, after = match(tokens)
        # Every third prefetch stays on the host: its window and state are host-only.
        loaded = load_back(cache, m.best_match_node) if after[1] and i % 3 != 2 else False
        m, end = match(tokens)
        prefix = cache.path_device_indices(m.last_device_node)[: m.device_prefix_len]
        kv_ok = swa is None or swa.holds(prefix, tokens)
        state_ok = check is None or all(check.holds(prefix, m.last_device_node, tokens))
        out.append(("serve", before, fetched, after, loaded, end, kv_ok, state_ok))
        out.append(("tree", tree()))
    # The host-only windows and states the prefetches left, in their host LRU lists' order.
    freed = cache.evict_host(cfg.page_size, SWA), cache.evict_host(1, MAMBA)
    out.append(("evict host SWA and states", freed, tree()))
    cache.sanity_check()
    return out


def run(cfg, core: str, backend: str, directory: Path, policy: str, servers=()) -> list[tuple]:
    for server in servers:  # one Redis or one Cluster's masters for the module: emptied
        server.client().flushall()  # so that each core starts on an empty store
    with storage_cache(cfg, core, backend, directory, policy) as (cache, allocator):
        return play(cache, allocator, cfg, 12, seed=5, twins=policy == "write_through_selective")


def need_redis() -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server missing: scripts/setup.sh installs it")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisProcess]]:
    need_redis()
    server = RedisProcess(tmp_path_factory.mktemp("redis")).start()
    yield [server]
    server.stop()


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisProcess]]:
    """Three masters, no replicas: every key lives on exactly one of them."""
    need_redis()
    nodes = start_cluster(tmp_path_factory.mktemp("cluster"), RedisProcess)
    yield nodes
    for node in nodes:
        node.stop()


def redis_url(backend: str, servers: list[RedisProcess]) -> str:
    if backend == "uniradix-redis":
        return f"redis://127.0.0.1:{servers[0].port}/0"
    # The default 0.5 s call deadline is a serving budget that a loaded 2-core test machine
    # can pass on a Cluster's first call (it maps the slots of three masters).
    return f"redis+cluster://127.0.0.1:{servers[0].port}?timeout_s=10"


CONFIGS = SWA_CONFIGS[:2] + MAMBA_CONFIGS[:2] + SWA_MAMBA_CONFIGS[:1]
SERVERS = {"uniradix-redis": "redis_server", "uniradix-cluster": "redis_cluster"}
# SGLang's file backend and `UniradixHiCacheStorage` on a file store and on Redis; under
# write-through (each insert backed up to the host, then to storage) and write-back (the
# device eviction backs nodes up to the host, and those backups go to storage): every pair.
# A Redis Cluster (pages spread over three masters by key slot) changes only where the
# pages live, not which the cache writes: every config under write-through, and the config
# with both SWA and Mamba pages under write-back. The selective write-through (a node backed
# up on its second hit) changes which nodes reach storage, not how: every config on SGLang's
# file backend and on ours on a file store.
CASES = (
    list(itertools.product(CONFIGS, ("file", "uniradix", "uniradix-redis"),
                           ("write_through", "write_back")))
    + [(cfg, "uniradix-cluster", "write_through") for cfg in CONFIGS]
    + [(SWA_MAMBA_CONFIGS[0], "uniradix-cluster", "write_back")]
    + list(itertools.product(CONFIGS, ("file", "uniradix"), ("write_through_selective",)))
)  # fmt: skip


@pytest.mark.parametrize(("cfg", "backend", "policy"), CASES, ids=lambda v: getattr(v, "label", v))
def test_aux_storage_plays_the_same_on_both_cores(cfg, backend, policy, tmp_path, request):
    servers = request.getfixturevalue(SERVERS[backend]) if backend in SERVERS else []
    url = {"UNIRADIX_TEST_REDIS": redis_url(backend, servers)} if servers else {}
    with mock.patch.dict(os.environ, url):
        expected = run(cfg, "python", backend, tmp_path / "python", policy, servers)
        trace = run(cfg, "uniradix", backend, tmp_path / "uniradix", policy, servers)
    if backend == "uniradix-cluster":
        assert sum(n.client().dbsize() > 0 for n in servers) > 1, "one master holds every page"
    served = [s for s in expected if s[0] == "serve"]
    if MAMBA in cfg.components:
        assert any(s[2] > 0 and s[3][2] for s in served), "no state prefetched from storage"
    if SWA in cfg.components:
        assert any(s[2] > 0 and s[3][3] for s in served), "no SWA window prefetched from storage"
    assert any(s[4] and s[5][0] > 0 for s in served), "nothing loaded back after a prefetch"
    assert all(s[6] and s[7] for s in served), "a prefix's KV or state is not its requests'"
    if policy == "write_through_selective":  # a node hit once is not backed up
        assert any(s[2] == 0 for s in served), "every request's pages were in storage"
    for want, got in zip(expected, trace, strict=True):
        assert got == want, want[0]
