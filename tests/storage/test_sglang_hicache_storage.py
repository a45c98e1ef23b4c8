"""`UniradixHiCacheStorage` loaded by SGLang's own dynamic backend factory (the
`--hicache-storage-backend dynamic` path) round-trips pages on a file store and on a real
Redis, through SGLang's single-page, batch and host-pool (v1, v2) calls; with Redis down it
gives misses, never an error."""

from __future__ import annotations

import pytest

from benchmarks.redis_servers import free_port
from tests.integrations.sglang_env import load_sglang

load_sglang()

import torch  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import (  # noqa: E402
    HiCacheStorageConfig,
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
)
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402

from uniradix.integrations.sglang.storage import UniradixHiCacheStorage  # noqa: E402

PAGE = 4  # tokens per host page
ROW = 8  # bytes of KV per token in the stand-in host pool


def load(url: str, tp_rank: int = 0) -> UniradixHiCacheStorage:
    config = HiCacheStorageConfig(
        tp_rank=tp_rank,
        tp_size=2,
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=False,
        enable_storage_metrics=False,
        is_page_first_layout=True,
        model_name="test/model",
        extra_config={
            "backend_name": "uniradix",
            "module_path": "uniradix.integrations.sglang.storage",
            "class_name": "UniradixHiCacheStorage",
            "url": url,
        },
    )
    backend = StorageBackendFactory.create_backend("dynamic", config, None)
    assert isinstance(backend, UniradixHiCacheStorage)
    return backend


class HostPool:
    """The three calls SGLang's backends make on a host pool, over a flat byte tensor."""

    def __init__(self, num_pages: int) -> None:
        self.page_size = PAGE
        self.data = torch.zeros(num_pages * PAGE, ROW, dtype=torch.uint8)

    def get_data_page(self, index: int, flat: bool = True) -> torch.Tensor:
        return self.data[index : index + PAGE].flatten()

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        return torch.empty(PAGE * ROW, dtype=torch.uint8)

    def set_from_flat_data_page(self, index: int, page: torch.Tensor) -> None:
        self.data[index : index + PAGE] = page.view(PAGE, ROW)


def round_trip(backend: UniradixHiCacheStorage) -> None:
    page = torch.arange(16, dtype=torch.float32)
    assert backend.set("h1", page) and backend.exists("h1") and not backend.exists("h0")
    out = torch.zeros(16)
    assert backend.get("h1", out) is out and torch.equal(out, page)
    assert backend.batch_set(["h2", "h3"], [page + 1, page + 2])
    assert backend.batch_exists(["h1", "h2", "h3", "h4", "h2"]) == 3

    source, target = HostPool(3), HostPool(3)
    source.data.copy_(torch.randint(0, 255, source.data.shape, dtype=torch.uint8))
    indices = torch.arange(3 * PAGE)
    backend.register_mem_pool_host(source)
    assert backend.batch_set_v1(["k1", "k2", "k3"], indices) == [True] * 3
    backend.register_mem_pool_host(target)
    assert (
        backend.batch_get_v1(["k1", "k2", "k3", "k9"], torch.arange(4 * PAGE)[:12]) == [False] * 4
    )  # 4 keys, 3 pages of indices: refused whole, as SGLang's own backends do
    assert backend.batch_get_v1(["k1", "k2", "k3"], indices) == [True] * 3
    assert torch.equal(target.data, source.data)

    # v2: KV plus a Mamba-like pool whose pages only need to cover the prefix's tail
    backend.register_mem_host_pool_v2(source, PoolName.KV)
    backend.register_mem_host_pool_v2(source, PoolName.MAMBA)
    kv = PoolTransfer(name=PoolName.KV, host_indices=indices, keys=["v1", "v2", "v3"])
    tail = PoolTransfer(
        name=PoolName.MAMBA,
        host_indices=indices[2 * PAGE :],
        keys=["v3"],
        hit_policy=PoolHitPolicy.TRAILING_PAGES,
    )
    assert backend.batch_set_v2([kv, tail]) == {PoolName.KV: [True] * 3, PoolName.MAMBA: [True]}
    hit = backend.batch_exists_v2(["v1", "v2", "v3", "v4"], [tail])
    assert hit.kv_hit_pages == 3 and hit.extra_pool_hit_pages[PoolName.MAMBA] == 3


def test_file_store_round_trip_through_sglangs_factory(tmp_path):
    round_trip(load(f"file://{tmp_path}/l3"))


def test_redis_round_trip_and_tensor_parallel_shards_are_apart(redis_server):
    redis_server.client().flushall()
    rank0, rank1 = load(redis_server.url, 0), load(redis_server.url, 1)
    round_trip(rank0)
    assert not rank1.exists("h1")  # another rank's slice of the page is not this rank's


def test_redis_down_gives_misses_not_errors():
    backend = load(f"redis://127.0.0.1:{free_port()}/0?timeout_s=0.05")
    page = torch.ones(4)
    assert backend.set("h1", page) is False
    assert backend.get("h1", torch.zeros(4)) is None
    assert not backend.exists("h1") and backend.batch_exists(["h1", "h2"]) == 0
    stats = backend.get_stats()
    assert stats.failed_ops >= 1 and stats.pages_missed >= 1


def test_a_config_without_url_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="extra_config\\['url'\\]"):
        load("")
