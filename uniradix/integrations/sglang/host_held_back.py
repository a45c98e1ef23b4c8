"""Write-back's held-back inner evictions on the uniradix TreeCore (SGLang's
`InternalStateBackup`), for SWA windows and Mamba states.

Under `hicache_write_policy=write_back` nothing reaches the host before eviction, so an SWA
or Mamba eviction walk that would drop the value of an inner node no copy of which is on
the host holds that node back instead: the walk's step names it (`swa_backup_node_id` with
the SWA tokens the backup needs, `mamba_backup_node_id`), the controller backs the node up
(full KV with the unbacked SWA of its window, or with its state) and then calls
`finish_swa_state_eviction` / `finish_mamba_state_eviction`, which drops the value unless
the node changed meanwhile. Semantics are those of SGLang's Python core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.unified_tree_core_interface import (
    EvictDeviceNextNodeResult,
)

from uniradix.integrations.sglang.mamba import MambaTree
from uniradix.integrations.sglang.swa import SWA_INDEX, SwaTree
from uniradix.integrations.sglang.walk import LruEvictionWalk
from uniradix.tree.core import TreeCore
from uniradix.tree.node import TreeNode

SWA = ComponentType.SWA


class HeldBackEvictions:
    """The hooks the SWA and Mamba walks ask (`backup_first`) and the controller's finishes."""

    tree: TreeCore
    swa: SwaTree | None
    mamba: MambaTree | None
    enable_hicache: bool
    is_write_back: bool
    has_swa_host_pool: bool
    _load_pending: dict[int, int]
    _nodes: dict[int, TreeNode]

    _swa_unbacked: Callable[[TreeNode], list[TreeNode]]  # host_swa.py
    _mamba_free_device: Callable[..., None]  # host_mamba.py

    def _reset_held_back(self) -> None:
        on = self.enable_hicache
        if self.swa is not None:
            self.swa.backup_first = self._swa_backup_first if on else None
        if self.mamba is not None:
            self.mamba.backup_first = self._mamba_backup_first if on else None

    def _report_held_back(self, result: Any, component_type: Any, node: TreeNode) -> None:
        """Names the held-back node in the walk's step, with the SWA host slots it needs."""
        if component_type == SWA:
            result.swa_backup_node_id = node.id
            result.swa_backup_num_tokens = sum(n.num_tokens for n in self._swa_unbacked(node))
        else:
            result.mamba_backup_node_id = node.id

    @staticmethod
    def _unbacked_with_full(node: TreeNode) -> bool:
        data = node.data[0]
        return data.host_value is None and data.value is not None

    # ------------------------------------------------------------------ SWA
    def _swa_backup_first(self, node: TreeNode) -> bool:
        """An inner window whose node has no host copy at all, and in which some SWA is on
        the device only, is backed up (with the node's full KV) before the walk drops it."""
        return (
            self.is_write_back
            and self.has_swa_host_pool
            and node.data[SWA_INDEX].host_value is None
            and self._unbacked_with_full(node)
            and bool(self._swa_unbacked(node))
        )

    def finish_swa_state_eviction(self, node_id: int) -> Any:
        """The SWA walk's held-back node, once the controller's backup ran: its window is
        tombstoned (its state with it), unless meanwhile it left, lost its SWA or got
        locked, or became an evictable leaf (the walk offers it again then)."""
        swa = self.swa
        node = self._take_held_back(swa, node_id, "finish_swa_state_eviction")
        result = EvictDeviceNextNodeResult(made_progress=True)
        if node is None or node.data[SWA_INDEX].value is None or node.data[SWA_INDEX].lock_ref:
            return result
        assert swa is not None
        if node in self.tree.leaves:
            swa.resume_at(node)
            return result
        swa.tombstone(node, result.device_frees, result.tracker)
        self.tree.update_leaf(node)
        return result

    # ------------------------------------------------------------------ Mamba
    def _mamba_backup_first(self, node: TreeNode) -> bool:
        """An inner state whose node has no host copy at all is backed up (with the node's
        full KV) before the Mamba eviction walk drops it."""
        assert self.mamba is not None
        return (
            self.is_write_back
            and node.data[self.mamba.index].host_value is None
            and self._unbacked_with_full(node)
        )

    def finish_mamba_state_eviction(self, node_id: int) -> Any:
        """The Mamba walk's held-back node, once the controller's backup ran: its state is
        dropped (a host copy now listed), unless meanwhile it left, got locked, is being
        loaded back or became an evictable leaf or lost its full KV (the walk offers it
        again then)."""
        mamba = self.mamba
        node = self._take_held_back(mamba, node_id, "finish_mamba_state_eviction")
        result = EvictDeviceNextNodeResult(made_progress=True)
        if node is None:
            return result
        assert mamba is not None
        data = node.data[mamba.index]
        if data.value is None or data.lock_ref or node_id in self._load_pending:
            return result
        if node in self.tree.leaves or node.data[0].value is None:
            mamba.resume_at(node)
            return result
        self._mamba_free_device(node, result, counted=True)
        self.tree.update_leaf(node)
        return result

    def _take_held_back(
        self, walk: LruEvictionWalk | None, node_id: int, method: str
    ) -> TreeNode | None:
        """Ends the walk's hold of `node_id`; the node, unless it left the tree meanwhile."""
        if walk is None or walk.deferred is None or walk.deferred.id != node_id:
            raise ValueError(f"{method}: node {node_id} is not held back")
        walk.deferred = None
        return self._nodes.get(node_id)
