"""Backups and load-backs of the uniradix TreeCore's host tier (HiCache: full KV, with the
SWA windows of `host_swa.py` and the Mamba states of `host_mamba.py`).

SGLang's controller copies KV between the tiers; the core tells it what to copy and records
where the copy landed: a backup gives a node its host copy (`commit_backup`), marked in
flight until the write's ack (`mark_write_through_pending`, `finish_write_through`); a
load-back gives the evicted bottom of a path its device values again (`commit_load_back`),
its host copies pinned until the ack under write-back (`finish_load_back`). A write-back
backup that fails for want of host space drops the leaf with its host-only subtree
(`drop_subtree_no_host`). Semantics are those of SGLang's Python core.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sglang.srt.disaggregation.kv_events import StorageMedium
from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer
from sglang.srt.mem_cache.unified_cache.cache_action import BackupKV
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.unified_tree_core_interface import (
    DropSubtreeNoHostResult,
)

from uniradix.integrations.sglang.host_eviction import HostEviction
from uniradix.integrations.sglang.host_mamba import MAMBA
from uniradix.integrations.sglang.host_swa import SWA
from uniradix.integrations.sglang.keys import to_slots, to_tensor
from uniradix.tree.node import TreeNode

FULL = ComponentType.FULL
CPU, GPU = StorageMedium.CPU, StorageMedium.GPU


class HostTransfers(HostEviction):
    # ------------------------------------------------------------------ backup
    def build_backup_spec(self, node_id: int) -> tuple[torch.Tensor, dict[Any, Any]]:
        """The node's full KV unless backed up, the SWA of its window not yet backed up and
        its Mamba state when on the device only."""
        node = self._node(node_id)
        data = node.data[0]
        if data.value is None:
            raise ValueError(f"build_backup_spec: node {node_id} has no device value")
        value = to_tensor(data.value, self.device)
        full = value[:0] if data.host_value is not None else value
        return full, {**self._swa_backup_transfers(node), **self._mamba_backup_transfers(node)}

    def build_backup_kv_action(self, node_id: int) -> Any:
        return self._backup_chain(self._node(node_id))

    def _backup_chain(self, node: TreeNode) -> Any:
        """`node` after its ancestors not yet backed up, root side first (write-through
        keeps every backed-up node's parent backed up)."""
        chain = [node.id]
        ancestor = node.parent
        while ancestor is not None and ancestor is not self.tree.root:
            if ancestor.data[0].host_value is not None:
                break
            chain.append(ancestor.id)
            ancestor = ancestor.parent
        chain.reverse()
        return BackupKV(node_ids=chain)

    def commit_backup(self, node_id: int, host_indices: Any, comp_xfers: Any) -> None:
        node = self._node(node_id)
        held = {c for c, tree in ((SWA, self.swa), (MAMBA, self.mamba)) if tree is not None}
        if set(comp_xfers) - held:
            raise ValueError(
                f"commit_backup: component transfers this core has none of: {comp_xfers}"
            )
        if host_indices.numel() > 0:
            node.data[0].host_value = to_slots(host_indices)
        if SWA in comp_xfers:
            self._swa_commit_backup(node, comp_xfers[SWA])
        if MAMBA in comp_xfers:
            self._mamba_commit_backup(node, comp_xfers[MAMBA])

    def mark_write_through_pending(self, node_ids: list[int], ack_id: int) -> list[int]:
        marked: list[tuple[int, int, int]] = []
        for node_id in node_ids:
            node = self._node(node_id)
            pending = self._write_pending.get(node_id)
            if pending not in (None, ack_id):
                raise ValueError(f"node {node_id} is already pending under write {pending}")
            self._write_pending[node_id] = ack_id
            marked.append((self.tree.prefix_len(node), len(marked), node_id))
        marked.sort()  # ancestors first; the given order among equals
        return [node_id for _, _, node_id in marked]

    def finish_write_through(self, node_ids: list[int], ack_id: int) -> None:
        for node_id in node_ids:
            node = self._node(node_id)
            if self._write_pending.get(node_id) == ack_id:
                del self._write_pending[node_id]
                self._track_duplicate(node)
            if self._events is not None:
                self._events.restored(node, CPU)

    # ------------------------------------------------------------------ failed backups
    def drop_subtree_no_host(self, node_id: int) -> Any:
        """Write-back under host pressure: a device leaf whose backup failed goes with its
        host-only subtree, unless a lock or an in-flight copy holds any of it."""
        result = DropSubtreeNoHostResult(is_dropped=False)
        node = self._node(node_id)
        if not self.tree.is_evictable_leaf(node) or node.data[0].host_value is not None:
            raise ValueError(f"drop_subtree_no_host: node {node_id} is not an unbacked leaf")
        subtree, stack = [], [node]
        while stack:
            cur = stack.pop()
            busy = cur.id in self._load_pending or (
                cur is not node and cur.id in self._write_pending
            )
            if busy or self._locked(cur):
                # The walk popped it and goes on without it, as SGLang's: it is offered
                # again once the walk ends.
                self._kept_leaves.append(node)
                return result
            subtree.append(cur)
            stack.extend(cur.children.values())
        for desc in reversed(subtree[1:]):  # host-only, deepest first
            if self._events is not None:
                self._events.removed(desc, CPU, drop=False)
            assert desc.data[0].host_value is not None and desc.data[0].value is None
            result.host_frees[FULL].append(torch.from_numpy(desc.data[0].host_value))
            desc.data[0].host_value = None
            self._swa_free_host(desc, result, counted=False)
            self._mamba_free_host(desc, result, counted=False)
            self._delete(desc)
        if self._events is not None:
            self._events.removed(node, GPU)
        self._free_device(node, result)
        self._delete(node, result)  # its state too
        result.is_dropped = True
        return result

    def _requeue_kept_leaves(self) -> None:
        for node in self._kept_leaves:
            self.tree.leaves.refresh(node)
        self._kept_leaves.clear()

    # ------------------------------------------------------------------ load-back
    def build_load_back_spec(self, node_id: int, req: Any = None) -> tuple[Any, dict[Any, Any]]:
        """The host copies of the evicted bottom of `node_id`'s path, root side first (and of
        the SWA window ending there that left the device, and of the anchor's Mamba state)."""
        anchor = self._node(node_id)
        node: TreeNode | None = anchor
        host, ids = [], []
        while node is not None and node.parent is not None and node.data[0].value is None:
            assert node.data[0].host_value is not None, f"{node} has no copy on either tier"
            host.append(node.data[0].host_value)
            ids.append(node.id)
            node = node.parent
        comp = {**self._swa_load_transfers(anchor), **self._mamba_load_transfers(anchor, req)}
        loaded = ids + [i for ts in comp.values() for t in ts for i in t.nodes_to_load or ()]
        if any(self._load_pending.get(i, node_id) != node_id for i in loaded):
            host, ids, comp = [], [], {}  # another load-back reads them: the caller backs off
        host.reverse()
        ids.reverse()
        indices = np.concatenate(host) if host else np.empty(0, dtype=np.int64)
        transfer = PoolTransfer(
            name=PoolName.KV, host_indices=torch.from_numpy(indices), nodes_to_load=ids
        )
        return transfer, comp

    def commit_load_back(
        self, node_id: int, device_indices: Any, kv_xfer: Any, comp_xfers: Any
    ) -> list[Any]:
        anchor = self._node(node_id)
        loaded = [self._node(i) for i in kv_xfer.nodes_to_load or ()]
        if self.is_write_back:  # pin the host copies against duplicate reclaim until the ack
            for node in loaded:
                self._load_pending[node.id] = node_id
        kv_xfer.device_indices = device_indices
        offset = 0
        for node in loaded:
            data = node.data[0]
            assert data.host_value is not None
            data.value = to_slots(device_indices, offset, offset + len(data.host_value))
            offset += len(data.host_value)
            if data.lock_ref:
                self._protected += node.num_tokens
            else:
                self._evictable += node.num_tokens
            self.tree.update_leaf(node)
        if self._events is not None:
            for node in loaded:
                self._events.restored(node, GPU)
        actions: list[Any] = []
        if SWA in comp_xfers:
            self._swa_commit_load(comp_xfers[SWA], actions)
        if MAMBA in comp_xfers:
            self._mamba_commit_load(anchor, comp_xfers[MAMBA])
        self.tree.update_leaf(anchor)
        return actions

    def finish_load_back(self, anchor_node_id: int) -> None:
        node: TreeNode | None = self._node(anchor_node_id)
        while node is not None and node.parent is not None:
            if self.is_write_back:
                if self._load_pending.get(node.id) != anchor_node_id:
                    node = node.parent
                    continue
                del self._load_pending[node.id]
            self._track_duplicate(node)
            node = node.parent
