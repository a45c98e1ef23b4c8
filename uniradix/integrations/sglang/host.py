"""SGLang's host tier (HiCache) on the uniradix TreeCore: full KV, with SWA and Mamba beside.

With HiCache on, a node whose device slots were evicted stays in the tree while its host
copy lives: component 0 keeps the device slots in `value` and SGLang's host pool indices in
`host_value`, and uniradix's tree counts such host-only children out of the device-leaf test
(`TreeCore.host_only_nodes`). Semantics follow SGLang's Python core (`UnifiedTreeCore`) so
its controller (`UnifiedRadixCache` with its `HybridCacheController`) gets the same answers
from both: a backed-up device leaf is demoted, an unbacked one deleted (write-through) or
handed back for a backup (write-back); a host lock pins a segment of host copies. Host
eviction is in `host_eviction.py`, backups and load-backs in `host_transfers.py`, the match
and insert walks of a HiCache cache in `host_walks.py`, L3 storage's page hashes and
transfers in `host_storage.py` (SWA windows: `host_swa_storage.py`), SWA host windows in
`host_swa.py`, Mamba host states in `host_mamba.py`, the SWA and Mamba evictions
write-back holds back for a backup in `host_held_back.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import count
from typing import Any

import torch
from sglang.srt.disaggregation.kv_events import StorageMedium
from sglang.srt.mem_cache.base_prefix_cache import (
    DecLockRefResult,
    IncLockRefResult,
)
from sglang.srt.mem_cache.unified_cache.cache_action import (
    BackupKV,
    UpdatePendingBackupOnNodeSplit,
)
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.unified_tree_core_interface import (
    BaseEvictionResult,
    DemoteResult,
    EvictDeviceLeafResult,
)

from uniradix.integrations.sglang.events import EventNodes
from uniradix.integrations.sglang.host_held_back import HeldBackEvictions
from uniradix.integrations.sglang.host_mamba import MAMBA, MambaHostTier
from uniradix.integrations.sglang.host_swa import SWA, SwaHostTier
from uniradix.integrations.sglang.keys import to_tensor
from uniradix.integrations.sglang.mamba import MambaTree
from uniradix.integrations.sglang.receipts import check_receipt
from uniradix.integrations.sglang.swa import SWA_INDEX, SwaTree
from uniradix.tree.core import TreeCore
from uniradix.tree.node import TreeNode
from uniradix.tree.policy import PolicyKey

FULL = ComponentType.FULL
CPU, GPU = StorageMedium.CPU, StorageMedium.GPU


class HostTier(SwaHostTier, MambaHostTier, HeldBackEvictions):
    """HiCache state and the TreeCore methods that move KV between device and host."""

    tree: TreeCore
    device: torch.device
    swa: SwaTree | None
    mamba: MambaTree | None
    enable_hicache: bool
    write_through_threshold: int
    _policy: PolicyKey
    _nodes: dict[int, TreeNode]
    _evictable: int
    _protected: int
    _events: EventNodes | None

    _node: Callable[[int], TreeNode]  # TreeCoreViews' look-up by id

    # ------------------------------------------------------------------ state
    def _reset_host(self) -> None:
        """Per-tree host state; called by `reset` (the host tier itself stays enabled)."""
        self.tree.host_only_nodes = self.enable_hicache
        # Node id -> ack id of its in-flight device->host write (write-through publish).
        self._write_pending: dict[int, int] = {}
        # Node id -> anchor of the in-flight host->device load reading its host copy.
        self._load_pending: dict[int, int] = {}
        # Full KV on both tiers, settled: what write-back reclaims first, oldest first.
        self._duplicates: dict[int, TreeNode] = {}
        self.write_back_duplicate_reclaim_digest = 0
        # Split actions a walk hands the controller (pending backups follow the split).
        self._split_actions: list[Any] = []
        self._host_uuids = count(1)
        # Device leaves a write-back walk popped but could neither back up nor drop.
        self._kept_leaves: list[TreeNode] = []
        self._reset_swa_host()
        self._reset_mamba_host()
        self._reset_held_back()

    def set_hicache_enabled(self) -> None:
        self.enable_hicache = True
        self.tree.host_only_nodes = True
        self._reset_swa_host()
        self._reset_mamba_host()
        self._reset_held_back()

    def set_host_memory_buffer_only(self) -> None:
        raise NotImplementedError(
            "uniradix TreeCore: set_host_memory_buffer_only needs SGLang's buffer-mode "
            "pipeline, which this core does not support yet"
        )

    def is_backuped(self, node_id: int) -> bool:
        return self._node(node_id).data[0].host_value is not None

    def component_has_host_value_only(self, node_id: int, component_type: Any) -> bool:
        if component_type == FULL:
            data = self._node(node_id).data[0]
        elif component_type == SWA and self.swa is not None:
            data = self._node(node_id).data[SWA_INDEX]
        elif component_type == MAMBA and self.mamba is not None:
            data = self._node(node_id).data[self.mamba.index]
        else:
            return False
        return data.value is None and data.host_value is not None

    def is_write_through_compatible(self) -> bool:
        """Every backed-up node's parent is backed up too (or the root), and no state copy
        is on the host under a node whose full KV has none."""
        return all(
            not self._mamba_host_without_full(n)
            and (
                n.data[0].host_value is None
                or n.parent is self.tree.root
                or (n.parent is not None and n.parent.data[0].host_value is not None)
            )
            for n in self.tree.nodes()
        )

    def _split_host(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        """A split of `child`: its host copy, host locks and in-flight marks go to `parent`
        for the first `split_len` units (a host lock's boundary moves up to the new part)."""
        old, new = child.data[0], parent.data[0]
        if old.host_value is not None:
            new.host_value, old.host_value = old.host_value[:split_len], old.host_value[split_len:]
        new.host_lock_ref = old.host_lock_ref
        if old.metadata and "host_uuid" in old.metadata:
            new.metadata = {"host_uuid": old.metadata.pop("host_uuid")}
        if child.id in self._load_pending:
            self._load_pending[parent.id] = self._load_pending[child.id]
        ack = self._write_pending.get(child.id)
        if ack is not None:
            self._write_pending[parent.id] = ack
            self._split_actions.append(
                UpdatePendingBackupOnNodeSplit(
                    ack_id=ack,
                    old_node_id=child.id,
                    new_node_id=parent.id,
                    new_child_node_id=child.id,
                )
            )
        if self.swa is not None:
            self._swa_split_host(parent, child)
        self._track_duplicate(parent)

    def _check_host(self, nodes: list[TreeNode]) -> None:
        """The host state's invariants, for `sanity_check`: marks name live nodes, no host
        lock count is negative, a host-only node's subtree is host-only."""
        for marks in (self._write_pending, self._load_pending, self._duplicates):
            assert all(i in self._nodes for i in marks), f"a mark outlived its node: {marks}"
        for node in nodes:
            data = node.data[0]
            assert data.host_lock_ref >= 0, node
            if data.value is None:
                assert all(c.data[0].value is None for c in node.children.values()), node
        self._swa_check_host(nodes)
        self._mamba_check_host()

    def _take_split_actions(self) -> list[Any]:
        actions, self._split_actions = self._split_actions, []
        return actions

    def _track_duplicate(self, node: TreeNode) -> None:
        """Registers `node` as a reclaimable host duplicate when it is one (lazily dropped)."""
        data = node.data[0]
        if (
            data.value is not None
            and data.host_value is not None
            and node.id not in self._write_pending
            and node.id not in self._load_pending
        ):
            self._duplicates.setdefault(node.id, node)
        else:
            self._duplicates.pop(node.id, None)

    # ------------------------------------------------------------------ locks
    def _lock_path_host(self, node: TreeNode, delta: int) -> int:
        """`_lock_path` with host-only nodes: the evicted bottom of the path is locked too,
        with no ledger move (nothing of it is on the device), and every node of the path may
        change its device-leaf membership."""
        moved, path = 0, []
        while node.parent is not None:
            data = node.data[0]
            if delta < 0 and data.lock_ref <= 0:
                raise ValueError(f"dec_lock_ref on unlocked node {node.id}")
            if data.value is not None and data.lock_ref == (0 if delta > 0 else 1):
                moved += node.num_tokens
            data.lock_ref += delta
            path.append(node)
            node = node.parent
        self._evictable -= delta * moved
        self._protected += delta * moved
        for n in path:
            self.tree.update_leaf(n)
        return moved

    def inc_host_lock_ref(self, node_id: int) -> Any:
        node = self._node(node_id)
        result = IncLockRefResult(node_id=node_id)
        data = node.data[0]
        if data.host_value is not None or self.is_write_back:  # else nothing to pin
            if not data.metadata or "host_uuid" not in data.metadata:
                data.metadata = {"host_uuid": next(self._host_uuids)}
            result.set_lock_uuid(FULL, data.metadata["host_uuid"], lock_host=True)
            data.host_lock_ref += 1
        if self.swa is not None:
            self._swa_lock_host(node, result)
        if self.mamba is not None:
            self._mamba_lock_host(node)
        return result

    def dec_host_lock_ref(self, node_id: int, params: Any) -> Any:
        check_receipt(node_id, params)
        # SGLang releases the components in reverse order.
        if self.mamba is not None:
            self._mamba_unlock_host(self._node(node_id))
        if self.swa is not None:
            self._swa_unlock_host(self._node(node_id), params)
        if FULL not in params.component_host_lock_uuids:
            return DecLockRefResult()  # the receipt pinned nothing
        boundary = params.get_lock_uuid(FULL, lock_host=True)
        node: TreeNode | None = self._node(node_id)
        while node is not None:
            data = node.data[0]
            if data.host_value is None and not self.is_write_back:
                break
            if data.host_lock_ref <= 0:
                raise ValueError(f"dec_host_lock_ref on node {node.id} holding no host lock")
            data.host_lock_ref -= 1
            if data.metadata and data.metadata.get("host_uuid") == boundary:
                break
            node = node.parent
        return DecLockRefResult()

    # ------------------------------------------------------------------ device eviction
    def _evict_device_leaf_host(self, node: TreeNode, is_write_back: bool) -> Any:
        """A device leaf leaves the device: demoted when backed up; otherwise handed back
        for its backup (write-back) or deleted with its childless tombstone ancestors."""
        result = EvictDeviceLeafResult()
        if node.data[0].host_value is not None:
            self._demote(node, result)
        elif is_write_back:
            result.backup_kv = BackupKV(node_ids=[node.id])
        else:
            result.unbacked_tokens = node.num_tokens
            if self._events is not None:
                self._events.removed(node, GPU)
            self._swa_free_device(node, result)
            self._free_device(node, result)
            self._swa_free_host(node, result, counted=False)
            self._mamba_free_host(node, result, counted=False)
            self._delete(node, result)  # its state on the device too
        return result

    def demote(self, node_id: int) -> Any:
        node = self._node(node_id)
        data = node.data[0]
        if data.value is None or data.host_value is None:
            raise ValueError(f"demote needs node {node_id} on both tiers")
        result = DemoteResult()
        self._demote(node, result)
        return result

    def _demote(self, node: TreeNode, result: BaseEvictionResult) -> None:
        if self.swa is not None:
            self._swa_free_device(node, result)  # SWA's slots are named by the full ones
            self._swa_dropped(node)  # a host-only window now, whatever its host locks
        self._free_device(node, result)
        if self.mamba is not None:  # the state goes too; a host copy of it stays listed
            self._mamba_free_device(node, result, counted=True)
            self._mamba_dropped(node)
        if self._events is not None:
            self._events.removed(node, GPU, drop=False)
        self.tree.update_leaf(node)
        if node.parent is not None:
            self.tree.update_leaf(node.parent)

    def _free_device(self, node: TreeNode, result: BaseEvictionResult) -> None:
        data = node.data[0]
        assert data.value is not None
        result.device_frees[FULL].append(to_tensor(data.value, self.device))
        result.tracker[FULL] += len(data.value)
        if data.lock_ref:
            self._protected -= node.num_tokens
        else:
            self._evictable -= node.num_tokens
        data.value = None

    def _delete(self, node: TreeNode, result: Any = None) -> None:
        """Removes a childless `node` holding no copy, then its ancestors left childless
        with no full KV and no lock (tombstones, their SWA host copies and Mamba states freed
        into `result`), as SGLang's core does: a state stays on the device only under full
        KV on the device."""
        while node.parent is not None and not node.children and not self._locked(node):
            data = node.data[0]
            if data.value is not None:
                break
            if result is not None:
                self._mamba_free_device(node, result, counted=True)
            if data.host_value is not None:
                break
            if result is not None:
                self._swa_free_host(node, result, counted=True)
                self._mamba_free_host(node, result, counted=True)
            parent = self.tree.remove_leaf(node)
            del self._nodes[node.id]
            for marks in (self._write_pending, self._load_pending, self._duplicates):
                marks.pop(node.id, None)
            if self._events is not None:
                self._events.forget(node)
            node = parent

    def _locked(self, node: TreeNode) -> bool:
        """Any lock on the node, device or host, of any component."""
        data = node.data[0]
        return bool(
            data.lock_ref
            or data.host_lock_ref
            or (self.swa is not None and self._swa_locked(node))
            or (self.mamba is not None and self._mamba_locked(node))
        )
