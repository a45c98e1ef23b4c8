"""Host eviction of the uniradix TreeCore's host tier (HiCache), as SGLang's Python core does
it: a host leaf (full KV on the host only, no child, no lock) goes whole with the tombstones
above it, in the cache's policy order; under write-back, host copies of nodes also on the
device are reclaimed first, in the order they became such duplicates. SWA windows and Mamba
states are evicted from the host in the order of their own host LRU lists (`host_lru.py`),
a host leaf met on the way going whole as above.
"""

from __future__ import annotations

import heapq
from typing import Any

import torch
from sglang.srt.environ import envs
from sglang.srt.mem_cache.unified_cache.unified_tree_core_interface import (
    BaseEvictionResult,
    DriveHostEvictionResult,
)

from uniradix.integrations.sglang.host import CPU, FULL, HostTier
from uniradix.integrations.sglang.host_lru import HostLru
from uniradix.integrations.sglang.host_mamba import MAMBA
from uniradix.integrations.sglang.host_swa import SWA
from uniradix.tree.node import TreeNode

_DIGEST_MASK = (1 << 42) - 1  # SGLang's width of the write-back reclaim digest


class HostEviction(HostTier):
    # ------------------------------------------------------------------ host eviction
    def _is_host_leaf(self, node: TreeNode) -> bool:
        data = node.data[0]
        return (
            node.parent is not None
            and data.value is None
            and data.host_value is not None
            and not node.children
            and not self._locked(node)
        )

    def drive_host_eviction(self, component_type: Any, num_tokens: int) -> Any:
        result = DriveHostEvictionResult()
        if component_type == SWA and self.swa is not None:
            # A state is useless without its window: its host copy goes with the window's.
            self._drive_aux_host_eviction(self._swa_lru, SWA, num_tokens, result)
            return result
        if component_type == MAMBA and self.mamba is not None:
            self._drive_aux_host_eviction(self._mamba_lru, MAMBA, num_tokens, result)
            return result
        if component_type != FULL:
            return result  # no other component of this core keeps host copies
        if self.is_write_back and not envs.SGLANG_HICACHE_SKIP_HOST_DUPLICATE_RECLAIM.get():
            self._reclaim_duplicates(num_tokens, result)
        policy = self._policy
        heap = [(policy(n), n.id, n) for n in self.tree.nodes() if self._is_host_leaf(n)]
        heapq.heapify(heap)
        while result.tracker[FULL] < num_tokens and heap:
            node = heapq.heappop(heap)[2]
            if not self._is_host_leaf(node):
                continue
            parent = node.parent
            assert parent is not None
            self._evict_host_leaf(node, result)
            if self._is_host_leaf(parent):
                heapq.heappush(heap, (policy(parent), parent.id, parent))
        return result

    def _drive_aux_host_eviction(
        self, lru: HostLru, component: Any, num_tokens: int, result: Any
    ) -> None:
        """SGLang's SWA or Mamba host eviction: the least recent unlocked host-only entries
        first; a host leaf goes whole, any other node loses its host copy of the component
        (and of the state, for SWA)."""
        for node in lru.eviction_order(lambda: result.tracker[component] >= num_tokens):
            if self._is_host_leaf(node):
                self._evict_host_leaf(node, result)
                continue
            if component == SWA:
                self._swa_free_host(node, result, counted=True)
            self._mamba_free_host(node, result, counted=True)

    def _evict_host_leaf(self, node: TreeNode, result: Any) -> None:
        """A host leaf goes whole: its host copies (counted), then the tombstones above."""
        self._evict_host_copy(node, result)
        self._swa_free_host(node, result, counted=True)
        self._mamba_free_device(node, result, counted=False)
        self._mamba_free_host(node, result, counted=True)
        self._delete(node, result)

    def _evict_host_copy(self, node: TreeNode, result: BaseEvictionResult) -> None:
        data = node.data[0]
        assert data.host_value is not None
        if self._events is not None:
            self._events.removed(node, CPU, drop=False)
        result.host_frees[FULL].append(torch.from_numpy(data.host_value))
        result.tracker[FULL] += len(data.host_value)
        data.host_value = None

    def _reclaim_duplicates(self, num_tokens: int, result: BaseEvictionResult) -> None:
        """Write-back: host copies of nodes also on the device go first, in the order they
        became duplicates; a first pass spares device leaves (about to be demoted)."""
        swept = []
        for spare_leaves in (True, False):
            for node in self._duplicates.values():
                if result.tracker[FULL] >= num_tokens:
                    break
                data = node.data[0]
                if data.value is None or data.host_value is None:
                    swept.append(node.id)  # stale entry
                    continue
                if spare_leaves and node in self.tree.leaves:
                    continue
                if (
                    node.id in self._write_pending
                    or node.id in self._load_pending
                    or data.host_lock_ref
                ):
                    continue
                self._evict_host_copy(node, result)
                swept.append(node.id)
                digest = self.write_back_duplicate_reclaim_digest * 1000003 + node.id + 1
                self.write_back_duplicate_reclaim_digest = digest & _DIGEST_MASK
        for node_id in swept:
            self._duplicates.pop(node_id, None)
