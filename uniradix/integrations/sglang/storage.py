"""`UniradixHiCacheStorage`: an SGLang HiCache L3 backend over uniradix's verified stores.

SGLang loads it with its dynamic backend factory::

    --hicache-storage-backend dynamic --hicache-storage-backend-extra-config '{
        "backend_name": "uniradix",
        "module_path": "uniradix.integrations.sglang.storage",
        "class_name": "UniradixHiCacheStorage",
        "url": "redis://127.0.0.1:6379/0"}'

`url` is any `uniradix.storage.open_backend` URL (`file:///path`, `redis://...`,
`redis+cluster://...`, with its options). Pages keep SGLang's own keys (its page-hash chain),
so SGLang's prefetch and backup find them; uniradix puts them in a key space of the model,
the tensor-parallel shard and the pool, frames each page with a header it checks on every
read, and runs the store behind its circuit breaker: a store that is down or returns a
corrupt page gives misses (False, None, a shorter prefix), never an exception.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch
from sglang.srt.mem_cache.hicache_storage import (
    HiCacheStorage,
    PoolHitPolicy,
    PoolName,
    PoolTransferResult,
)

from uniradix.hashing.page import DIGEST_BYTES
from uniradix.hashing.storage_keys import KeySpace, PageKey
from uniradix.storage.backend import open_backend
from uniradix.storage.page_format import Miss

KV = PoolName.KV.value


class UniradixHiCacheStorage(HiCacheStorage):  # type: ignore[misc]
    def __init__(self, storage_config: Any, kwargs: Any = None) -> None:
        extra = dict(storage_config.extra_config or {})
        url = extra.get("url")
        if not url:
            raise ValueError(f"UniradixHiCacheStorage needs extra_config['url'], got {extra!r}")
        self.store = open_backend(str(url))
        self.model = str(extra.get("model_fingerprint") or storage_config.model_name or "")
        if not self.model:
            raise ValueError("UniradixHiCacheStorage needs a model name or model_fingerprint")
        # MLA KV is the same on every tensor-parallel rank: one copy serves them all.
        tp = storage_config.tp_size
        self.shard = "" if storage_config.is_mla_model else f"tp{storage_config.tp_rank}of{tp}"
        self.layout = "page_first" if storage_config.is_page_first_layout else "layer_first"
        self._spaces: dict[str, KeySpace] = {}

    # ------------------------------------------------------------------ keys
    def _space(self, pool: str) -> KeySpace:
        """One key space per pool. SGLang's page hash already covers the tokens and the page
        size; the page's dtype and shape are its host pool's, checked by length on read."""
        space = self._spaces.get(pool)
        if space is None:
            space = KeySpace(self.model, "host_pool", self.layout, 1, pool, self.shard)
            self._spaces[pool] = space
        return space

    def _keys(self, keys: Sequence[str], pool: str = KV) -> list[PageKey]:
        """uniradix keys for SGLang's: its page hash, digested to the header's width."""
        space = self._space(pool)
        out = []
        for key in keys:
            digest = hashlib.blake2b(key.encode(), digest_size=DIGEST_BYTES).digest()
            out.append(PageKey(space.key_head + key, space.fingerprint, digest))
        return out

    # ------------------------------------------------------------------ single pages
    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        if target_location is None:
            raise ValueError("UniradixHiCacheStorage.get reads into target_location; got None")
        return self._read([key], [target_location])[0]

    def set(
        self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None
    ) -> bool:
        return self._write([key], [value]) == 1

    def exists(self, key: str) -> bool:
        return self.store.batch_exists(self._keys([key])) == 1

    def batch_get(
        self, keys: list[str], target_locations: Any = None, target_sizes: Any = None
    ) -> list[torch.Tensor | None]:
        return self._read(keys, list(target_locations))

    def batch_set(
        self,
        keys: list[str],
        values: Any = None,
        target_locations: Any = None,
        target_sizes: Any = None,
    ) -> bool:
        return self._write(keys, list(values)) == len(keys)

    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        return self.store.batch_exists(self._keys(keys))

    def _read(
        self, keys: Sequence[str], targets: list[torch.Tensor], pool: str = KV
    ) -> list[torch.Tensor | None]:
        pages = self.store.batch_get(
            self._keys(keys, pool), expected_bytes=_nbytes(targets[0]) if targets else None
        )
        out: list[torch.Tensor | None] = []
        for page, target in zip(pages, targets, strict=True):
            if isinstance(page, Miss):
                out.append(None)
                continue
            flat = target.view(-1).view(torch.uint8)
            flat.copy_(torch.frombuffer(bytearray(page), dtype=torch.uint8))
            out.append(target)
        return out

    def _write(self, keys: Sequence[str], values: list[torch.Tensor], pool: str = KV) -> int:
        payloads = [v.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().data
                    for v in values]  # fmt: skip
        return self.store.batch_set(self._keys(keys, pool), payloads)

    # ------------------------------------------------------------------ host pools (v1, v2)
    def batch_get_v1(
        self, keys: list[str], host_indices: Any, extra_info: Any = None
    ) -> list[bool]:
        return self._pool_io(KV, self.mem_pool_host, keys, host_indices, read=True)

    def batch_set_v1(
        self, keys: list[str], host_indices: Any, extra_info: Any = None
    ) -> list[bool]:
        return self._pool_io(KV, self.mem_pool_host, keys, host_indices, read=False)

    def batch_get_v2(self, transfers: list[Any], extra_info: Any = None) -> dict[str, list[bool]]:
        return {t.name: self._transfer_io(t, read=True) for t in transfers}

    def batch_set_v2(self, transfers: list[Any], extra_info: Any = None) -> dict[str, list[bool]]:
        return {t.name: self._transfer_io(t, read=False) for t in transfers}

    def _transfer_io(self, transfer: Any, read: bool) -> list[bool]:
        pool = self.registered_pools[transfer.name]
        keys = transfer.keys or []
        return self._pool_io(str(transfer.name), pool, keys, transfer.host_indices, read)

    def _pool_io(
        self, name: str, pool: Any, keys: list[str], host_indices: Any, read: bool
    ) -> list[bool]:
        page_size = getattr(pool, "page_size", 1) or 1
        if host_indices is None or host_indices.numel() != len(keys) * page_size:
            return [False] * len(keys)
        starts = [int(host_indices[i * page_size]) for i in range(len(keys))]
        if not read:
            pages = [pool.get_data_page(s, flat=True) for s in starts]
            done = self._write(keys, pages, name)
            return [i < done for i in range(len(keys))]
        targets = [pool.get_dummy_flat_data_page() for _ in starts]
        ok = []
        for start, page in zip(starts, self._read(keys, targets, name), strict=True):
            if page is not None:
                pool.set_from_flat_data_page(start, page)
            ok.append(page is not None)
        return ok

    def batch_exists_v2(
        self, keys: list[str], pool_transfers: Any = None, extra_info: Any = None
    ) -> Any:
        """The stored KV prefix, shortened where an extra pool (Mamba, SWA, DSA) lacks pages
        its hit policy needs: every page (`all_pages`) or the last ones (`trailing_pages`)."""
        kv_pages = self.store.batch_exists(self._keys(keys))
        hits: dict[str, int] = {KV: kv_pages} if kv_pages else {}
        restorable = set(range(1, kv_pages + 1))
        for transfer in pool_transfers or []:
            if not restorable:
                break
            name = str(transfer.name)
            if transfer.hit_policy == PoolHitPolicy.ALL_PAGES:
                found = self.store.batch_exists(self._keys(keys[:kv_pages], name))
                pool_ok = set(range(1, found + 1))
            else:
                trailing = len(transfer.keys or ()) or 1
                stored = [self.exists_in(k, name) for k in keys[:kv_pages]]
                pool_ok = {
                    end
                    for end in range(1, kv_pages + 1)
                    if all(stored[max(0, end - trailing) : end])
                }
            if pool_ok:
                hits[name] = max(pool_ok)
            restorable &= pool_ok
        usable = max(restorable, default=0)
        return PoolTransferResult(usable, hits, sorted(restorable))

    def exists_in(self, key: str, pool: str) -> bool:
        return self.store.batch_exists(self._keys([key], pool)) == 1

    def clear(self) -> None:
        self.store.clear()

    def get_stats(self) -> Any:
        return self.store.stats()

    def close(self) -> None:
        self.store.close()


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
