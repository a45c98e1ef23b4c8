"""SGLang's L3 storage (HiCache storage backend) on the uniradix TreeCore: FULL, SWA, Mamba.

L3 storage keys a page by a hash chained from its parent page's (SGLang's
`compute_node_hash_values`), kept per node. They live on the views `events.py` keeps beside
each uniradix node for SGLang's KV events: one field in SGLang's node serves both, so the
events and the storage keys stay the same values, as in SGLang's Python core. With storage
on (`enable_storage`), a node is hashed when it is stored; a prefetched host path
(`insert_host`) takes the hashes storage gave; a split divides them; a backend attached
while the tree holds nodes hashes those first (`backfill_missing_hash_values`). A backup to
storage reads a node's host copy, tokens and hashes (`build_storage_backup_spec`), with a
Mamba cache the node's state copy too; a prefetch of a Mamba cache stages one state
(`build_hicache_transfers`) that becomes the host copy of the node its insert ended at
(`commit_hicache_transfers`, `host_mamba.py`); with SWA, the node's SWA host pages and a
prefetch's window (`host_swa_storage.py`). Buffer mode stays refused by name. Semantics are those of
SGLang's Python core.
"""

from __future__ import annotations

from array import array
from typing import Any

import torch
from sglang.srt.disaggregation.kv_events import StorageMedium
from sglang.srt.mem_cache.base_prefix_cache import InsertResult
from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer
from sglang.srt.mem_cache.radix_cache import RadixKey as SGLangKey
from sglang.srt.mem_cache.unified_cache.components import CacheTransferPhase
from sglang.srt.mem_cache.unified_cache.unified_tree_core import StorageBackupSpec
from sglang.srt.mem_cache.utils import compute_node_hash_values

from uniradix.integrations.sglang.events import EventNode, EventNodes
from uniradix.integrations.sglang.host_mamba import MAMBA
from uniradix.integrations.sglang.host_swa import SWA
from uniradix.integrations.sglang.host_swa_storage import SwaStorage
from uniradix.integrations.sglang.host_walks import HostWalks
from uniradix.integrations.sglang.keys import to_slots, to_uniradix_key
from uniradix.key import UNIT_BYTES

CPU = StorageMedium.CPU
_SALT = "\x00salt:"  # how `keys.namespace` joins SGLang's extra key and cache salt


def sglang_namespace(namespace: str | None) -> tuple[str | None, str | None]:
    """SGLang's (extra_key, cache_salt) of a uniradix namespace made by `keys.namespace`."""
    if namespace is None or _SALT not in namespace:
        return namespace, None
    extra, salt = namespace.split(_SALT, 1)
    return extra or None, salt


class HostStorage(HostWalks, SwaStorage):
    """Page hashes on the tree and the TreeCore methods of SGLang's L3 storage path."""

    _storage: bool = False
    kv_events: Any  # SGLang's KVCacheEventRecorder (core.py)

    # ------------------------------------------------------------------ switch
    @property
    def enable_storage(self) -> bool:
        return self._storage

    @enable_storage.setter
    def enable_storage(self, value: bool) -> None:
        # SGLang's cache sets it when a storage backend attaches (and at build, off).
        if value and not self._storage:
            self._hash_views().hashing = True
        elif not value and self._storage and self._events is not None:
            self._events.hashing = False
        self._storage = bool(value)

    def _new_event_nodes(self) -> EventNodes | None:
        """The views of a fresh tree: kept when KV events or storage hashes need them."""
        if not (self.kv_events.enabled or self._storage):
            return None
        views = EventNodes(self.kv_events, self.page_size, self.tree.root.id)
        views.hashing = self._storage
        return views

    def _hash_views(self) -> EventNodes:
        """The views, built for every node of the tree (unhashed) where none were kept."""
        if self._events is not None:
            return self._events
        views = EventNodes(self.kv_events, self.page_size, self.tree.root.id)
        stack = list(self.tree.root.children.values())
        while stack:  # parents before children: a view links to its parent's
            node = stack.pop()
            tokens = array("q")
            tokens.frombytes(node.key)
            extra, salt = sglang_namespace(node.extra_key)
            views.adopt(node, SGLangKey(tokens, extra, cache_salt=salt))
            stack.extend(node.children.values())
        self._events = views
        return views

    def _view(self, node_id: int) -> EventNode | None:
        node = self._node(node_id)
        return None if self._events is None else self._events.views.get(node.id)

    # ------------------------------------------------------------------ hashes
    def get_hash_values(self, node_id: int) -> list[str]:
        view = self._view(node_id)
        return (view.hash_value if view is not None else None) or []

    def get_last_hash_value(self, node_id: int) -> str | None:
        hashes = self.get_hash_values(node_id)
        return hashes[-1] if hashes else None

    def get_prefix_hash_values(self, node_id: int) -> list[str]:
        """The hashes of the node's ancestors, root side first, up to the first unhashed."""
        view = self._view(node_id)
        chunks = []
        cur = None if view is None else view.parent
        while cur is not None and cur.hash_value is not None:
            chunks.append(cur.hash_value)
            cur = cur.parent
        return [h for chunk in reversed(chunks) for h in chunk]

    def backfill_missing_hash_values(self) -> int:
        """Hashes every node built with hashing off, parents first (a node hashed against
        an unhashed parent would restart the chain mid-sequence); returns how many."""
        views = self._hash_views()
        filled, stack = 0, list(self.tree.root.children.values())
        while stack:
            node = stack.pop()
            view = views.views[node.id]
            if view.hash_value is None:
                view.hash_value = compute_node_hash_values(view, self.page_size)
                filled += 1
            stack.extend(node.children.values())
        return filled

    # ------------------------------------------------------------------ host insert
    def insert_host(self, node_id: int, key: Any, host_value: Any, hash_value: list[str]) -> Any:
        """Hangs `key`'s host copy (`host_value`, prefetched from storage, its page hashes
        `hash_value`) below `node_id`: nodes it reaches with no host copy get theirs
        (write-through), the rest a new host-only leaf."""
        tree, ps = self.tree, self.page_size
        views = self._hash_views()
        node = self._node(node_id)
        node.last_access_time = tree.tick()
        tree.leaves.refresh(node)
        ukey, total = to_uniradix_key(key, ps)
        if total == 0:
            return InsertResult(prefix_len=0, mamba_exist=True)
        units, ns, end = ukey.units, ukey.extra_key, total * UNIT_BYTES
        off, host_prefix, refilled = 0, 0, None
        actions: list[Any] = []
        while off < total:
            step = self._step_down(node, ukey, off, end, actions)
            if step is None:
                break
            child, p = step
            tree.leaves.refresh(child)
            if not self.is_write_back:
                data = child.data[0]
                if data.host_value is None:
                    data.host_value = to_slots(host_value, off, off + p)
                    view = views.views[child.id]
                    if view.hash_value is None:
                        view.hash_value = list(hash_value[off // ps : (off + p) // ps])
                    views.restored(child, CPU)
                    self._track_duplicate(child)
                    refilled = child
                elif refilled is None:
                    host_prefix += p
                else:
                    raise ValueError(
                        f"insert_host: node {child.id} is backed up below node {refilled.id}, "
                        "which was not: the write-through host prefix is broken"
                    )
            node, off = child, off + p
        result = InsertResult(
            prefix_len=off if self.is_write_back else host_prefix,
            total_len=len(key),
            cache_actions=actions,
        )
        is_root = node is tree.root
        if off == total:
            if not is_root and (refilled is not None or node.data[0].host_value is not None):
                result.inserted_host_node = node.id
            return result
        if not is_root and node.data[0].host_value is None and not self.is_write_back:
            result.host_insert_dropped = True  # a host path must hang below a backed-up node
            return result
        leaf = self._new_leaf(node, units[off * UNIT_BYTES : end], ns, node.priority)
        leaf.data[0].host_value = to_slots(host_value, off, total)
        result.inserted_host_node = leaf.id
        views.stored(leaf, key, off, None, CPU, hashes=list(hash_value[off // ps :]))
        return result

    # ------------------------------------------------------------------ storage transfers
    def build_storage_backup_spec(self, node_id: int, pass_prefix_keys: bool) -> Any:
        """What a backup to storage writes: the node's host copy, tokens and page hashes,
        and its Mamba state copy (None: no host copy to write from)."""
        node = self._node(node_id)
        host = node.data[0].host_value
        if host is None:
            return None
        view = self._hash_views().views[node.id]
        comp = {SWA: self._swa_storage_backup(node, view.hash_value)}
        comp[MAMBA] = self._mamba_storage_backup(node, view.hash_value)
        return StorageBackupSpec(
            host_value=torch.from_numpy(host),
            token_ids=view.key.token_ids,
            hash_value=view.hash_value,
            prefix_keys=self.get_prefix_hash_values(node_id) if pass_prefix_keys else None,
            comp_xfers={c: transfers for c, transfers in comp.items() if transfers},
        )

    def build_hicache_transfers(
        self, component_type: Any, node_id: int, phase: Any, **kwargs: Any
    ) -> list[Any] | None:
        """A prefetch's SWA window pages or Mamba state, their keys named once storage is
        asked (placeholders, as SGLang's); no other component transfer is asked of a core."""
        self._node(node_id)
        held = (SWA, self.swa), (MAMBA, self.mamba)
        if phase != CacheTransferPhase.PREFETCH or all(
            c != component_type or t is None for c, t in held
        ):
            raise NotImplementedError(
                f"uniradix TreeCore: build_hicache_transfers({component_type}, {phase}) is a "
                "component transfer outside SGLang's L3 prefetch, not supported yet"
            )
        staging = kwargs.get("staging_tokens", 0)
        if component_type == SWA:
            return self._swa_prefetch_transfer(staging)
        if not staging:
            return None
        trailing = PoolHitPolicy.TRAILING_PAGES
        return [PoolTransfer(PoolName.MAMBA, keys=["__placeholder__"], hit_policy=trailing)]

    def prefetch_anchor_info(self, node_id: int) -> tuple[str | None, str | None]:
        node = self._node(node_id)
        if node.parent is None:
            return None, None
        return sglang_namespace(node.extra_key)

    def commit_hicache_transfers(
        self,
        node_id: int,
        phase: Any,
        comp_xfers: Any,
        *,
        cache_actions: list[Any],
        insert_result: Any = None,
        pool_storage_result: Any = None,
    ) -> None:
        """A prefetch's component transfers: the SWA window (`host_swa_storage.py`), then the
        Mamba state (`host_mamba.py`), as SGLang's controller orders them."""
        anchor = self._node(node_id)
        if set(comp_xfers) - {SWA, MAMBA} or (comp_xfers and phase != CacheTransferPhase.PREFETCH):
            raise NotImplementedError(
                f"uniradix TreeCore: commit_hicache_transfers({phase}) got component "
                f"transfers {sorted(str(c) for c in comp_xfers)} outside SGLang's L3 "
                "prefetch, not supported yet"
            )
        if SWA in comp_xfers:
            self._swa_commit_prefetch(
                anchor, comp_xfers[SWA], cache_actions, insert_result, pool_storage_result
            )
        if MAMBA in comp_xfers:
            self._mamba_commit_prefetch(
                comp_xfers[MAMBA], cache_actions, insert_result, pool_storage_result
            )
