"""`UniradixTreeCore`: SGLang's `UnifiedTreeCoreInterface` on uniradix's radix tree.

SGLang's `UnifiedRadixCache` (its controller, components and pools) drives a TreeCore through
that interface only; this one keeps the tree in `uniradix.tree.core.TreeCore` (one component,
full attention, on the device tier) and answers SGLang's calls from it. What it does not
cover is refused when the cache is built (see `check_supported`), or, for the host tier,
raises `NotImplementedError` naming the method (see `refused.py`).

Semantics follow SGLang's Python core, so both give the same results on the same calls:
duplicates past `prev_prefix_len` are handed back as one `FreeDeviceKV`, an eviction walk
stops once the tracker reaches the requested count, and a lock pins the node's root path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from sglang.srt.mem_cache.base_prefix_cache import (
    DecLockRefResult,
    IncLockRefResult,
    InsertResult,
    MatchResult,
)
from sglang.srt.mem_cache.events import KVCacheEventRecorder
from sglang.srt.mem_cache.unified_cache.cache_action import FreeDeviceKV
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.unified_tree_core_interface import (
    EvictDeviceLeafResult,
    EvictDeviceNextNodeResult,
    InsertStepResult,
)

from uniradix.integrations.sglang.keys import to_slots, to_tensor, to_uniradix_key
from uniradix.integrations.sglang.refused import RefusedTreeCoreMethods, check_supported
from uniradix.tree.core import TreeCore
from uniradix.tree.node import TreeNode
from uniradix.tree.policy import eviction_policy

FULL = ComponentType.FULL


class UniradixTreeCore(RefusedTreeCoreMethods):
    """The FULL (full-attention) device tier of SGLang's unified cache on uniradix's tree."""

    supports_rotation_base = False

    def __init__(self, params: Any, components: dict[Any, Any] | None = None) -> None:
        check_supported(params)
        self.page_size: int = params.page_size
        allocator = params.token_to_kv_pool_allocator
        self.device = torch.device(allocator.device if allocator is not None else "cpu")
        self.is_eagle = False
        self.enable_hicache = False
        self.enable_storage = False
        self.enable_external_cache_linker = False
        self.write_through_threshold = 1
        self.is_write_back = False
        self.has_swa_host_pool = False
        self.is_host_memory_buffer_only = False
        self.kv_events = KVCacheEventRecorder(enabled=False, page_size=self.page_size)
        self._policy = eviction_policy(params.eviction_policy.lower())
        self._insert_step: InsertStepResult | None = None
        self._walk_quota = 0
        self.reset()

    # ------------------------------------------------------------------ tree state
    def reset(self) -> None:
        self.tree = TreeCore(1, self.page_size, self._policy, split_hooks=[self])
        self._nodes: dict[int, TreeNode] = {self.tree.root.id: self.tree.root}
        self._evictable = 0
        self._protected = 0
        root = self.tree.root.id
        self._empty = MatchResult(
            device_prefix_len=0,
            last_device_node=root,
            last_host_node=root,
            best_match_node=root,
            cache_actions=[],
        )

    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        """The tree cut `child`: its first `split_len` slots and its locks go to `parent`."""
        value = child.data[0].value
        assert value is not None
        parent.data[0].value, child.data[0].value = value[:split_len], value[split_len:]
        parent.data[0].lock_ref = child.data[0].lock_ref
        self._nodes[parent.id] = parent

    def _node(self, node_id: int) -> TreeNode:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise KeyError(f"node {node_id} is not in the uniradix tree") from None

    def is_root(self, node_id: int) -> bool:
        return node_id == self.tree.root.id

    def root_node_handle(self, extra_key: str | None = None) -> int:
        return self.tree.root.id

    def is_backuped(self, node_id: int) -> bool:
        return False

    def is_write_through_compatible(self) -> bool:
        return True

    # ------------------------------------------------------------------ match
    @property
    def empty_match_result(self) -> Any:
        return self._empty

    def match_prefix(self, params: Any) -> Any:
        key, num_units = to_uniradix_key(params.key, self.page_size)
        if num_units == 0:
            return self._empty
        walk = self.tree.match(key, num_units, ())
        if not walk.path:
            return self._empty
        self.tree.touch_path(walk.path)
        last = walk.path[-1].id
        return MatchResult(
            device_prefix_len=walk.matched_len,
            last_device_node=last,
            last_host_node=last,
            best_match_node=last,
            last_visited_node_id=last,
            host_hit_length=0,
            full_kv_hit_length=walk.matched_len,
            cache_actions=[],
        )

    def supports_fast_match_prefix(self) -> bool:
        return True

    def collect_full_device_indices(self, from_node_id: int, until_node_id: int) -> torch.Tensor:
        until, node = self._node(until_node_id), self._node(from_node_id)
        chunks = []
        while node is not until and node.parent is not None:
            value = node.data[0].value
            assert value is not None, f"node {node.id} on the path has no device value"
            chunks.append(value)
            node = node.parent
        if not chunks:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        chunks.reverse()
        return to_tensor(np.concatenate(chunks), self.device)

    def is_full_device_evicted(self, node_id: int) -> bool:
        node = self._nodes.get(node_id)
        return node is None or node.data[0].value is None

    def get_component_device_value(self, node_id: int, component_type: Any) -> Any:
        value = self._node(node_id).data[0].value
        if component_type != FULL or value is None:
            return None
        return to_tensor(value, self.device)

    def component_has_host_value_only(self, node_id: int, component_type: Any) -> bool:
        return False

    # ------------------------------------------------------------------ insert
    def begin_insert(self, params: Any) -> Any:
        if self._insert_step is not None:
            raise RuntimeError("concurrent insert walks")
        key, num_units = to_uniradix_key(params.key, self.page_size)
        root = self.tree.root.id
        if num_units == 0:
            done = InsertResult(prefix_len=0, mamba_exist=True, last_device_node=root)
            return InsertStepResult(actions=[], result=done)
        if params.value is None:  # SGLang's own tests insert keys alone: slots = token ids
            value = torch.tensor(key.tolist()[:num_units], dtype=torch.int64)
        else:
            value = params.value[:num_units]
        floor = params.prev_prefix_len
        duplicates: list[torch.Tensor] = []

        def on_overlap(node: TreeNode, offset: int, units: int) -> None:
            start = max(offset, floor)
            if start < offset + units:
                duplicates.append(value[start : offset + units])

        target, present, is_new = self.tree.insert(
            key, num_units, on_overlap, params.inserted_len, params.priority or 0
        )
        if is_new:
            target.data[0].value = to_slots(value[present:])
            self._nodes[target.id] = target
            self._evictable += target.num_tokens
            self.tree.update_leaf(target)
        actions = [FreeDeviceKV(indices=duplicates)] if duplicates else []
        result = InsertResult(prefix_len=present, last_device_node=target.id)
        self._insert_step = InsertStepResult(actions=actions, result=result)
        return self._insert_step

    def resume_insert(self) -> Any:
        raise RuntimeError("the uniradix TreeCore inserts in one step: nothing to resume")

    def has_ongoing_insert(self) -> bool:
        return False

    def end_insert(self) -> list[Any]:
        # The single step's actions were handed out with it; nothing is pending.
        self._insert_step = None
        return []

    # ------------------------------------------------------------------ locks
    def _lock_path(self, node: TreeNode, delta: int) -> int:
        """Adds `delta` (+1/-1) to every lock on the root path; returns tokens that changed
        between evictable and protected."""
        moved = 0
        start = node
        while node.parent is not None:
            data = node.data[0]
            if delta < 0 and data.lock_ref <= 0:
                raise ValueError(f"dec_lock_ref on unlocked node {node.id}")
            if data.lock_ref == (0 if delta > 0 else 1):
                moved += node.num_tokens
            data.lock_ref += delta
            node = node.parent
        self._evictable -= delta * moved
        self._protected += delta * moved
        # Only `start` can be a leaf: every other node of the path has a child on it.
        self.tree.update_leaf(start)
        return moved

    def inc_lock_ref(self, node_id: int, skip_lock_components: Sequence[Any] = ()) -> Any:
        moved = self._lock_path(self._node(node_id), +1)
        skipped = tuple(skip_lock_components)
        return IncLockRefResult(delta=moved, node_id=node_id, skipped_lock_components=skipped)

    def dec_lock_ref(self, node_id: int, params: Any, skip_swa: bool = False) -> Any:
        if params.node_id != node_id:
            raise ValueError(f"lock receipt of node {params.node_id} released on node {node_id}")
        self._lock_path(self._node(node_id), -1)
        return DecLockRefResult()

    def inc_full_pin(self, node_id: int) -> None:
        self._lock_path(self._node(node_id), +1)

    def dec_full_pin(self, node_id: int) -> None:
        self._lock_path(self._node(node_id), -1)

    # ------------------------------------------------------------------ eviction
    def evict_device_start(self, component_type: Any, request_cnt: int) -> None:
        self._walk_quota = request_cnt

    def evict_device_next_node(self, component_type: Any, tracker: dict[Any, int]) -> Any:
        result = EvictDeviceNextNodeResult()
        if component_type == FULL and tracker.get(FULL, 0) < self._walk_quota:
            leaf = self.tree.leaves.pop()
            if leaf is not None:
                result.node_id, result.made_progress = leaf.id, True
        return result

    def evict_device_leaf(self, node_id: int, is_write_back: bool) -> Any:
        node = self._node(node_id)
        if not self.tree.is_evictable_leaf(node):
            raise ValueError(f"node {node_id} is not an evictable device leaf")
        value = node.data[0].value
        assert value is not None
        node.data[0].value = None
        self._evictable -= node.num_tokens
        self.tree.remove_leaf(node)
        del self._nodes[node_id]
        result = EvictDeviceLeafResult()
        result.device_frees[FULL].append(to_tensor(value, self.device))
        result.tracker[FULL] = len(value)
        return result

    def evict_device_end(self, component_type: Any) -> None:
        self._walk_quota = 0

    # ------------------------------------------------------------------ sizes
    def evictable_size(self) -> int:
        return self._evictable

    def protected_size(self) -> int:
        return self._protected

    def full_evictable_size(self) -> int:
        return self._evictable

    def full_protected_size(self) -> int:
        return self._protected

    def component_evictable_size(self, component_type: Any) -> int:
        return self._evictable if component_type == FULL else 0

    def component_protected_size(self, component_type: Any) -> int:
        return self._protected if component_type == FULL else 0

    def swa_evictable_size(self) -> int:
        return 0

    def swa_protected_size(self) -> int:
        return 0

    def mamba_evictable_size(self) -> int:
        return 0

    def mamba_protected_size(self) -> int:
        return 0

    def total_size(self) -> tuple[int, int]:
        return self._evictable + self._protected, 0

    def all_values_flatten(self) -> torch.Tensor:
        values = [n.data[0].value for n in self.tree.nodes()]
        kept = [v for v in values if v is not None]
        if not kept:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        return to_tensor(np.concatenate(kept), self.device)

    def all_mamba_values_flatten(self) -> torch.Tensor:
        return torch.empty(0, dtype=torch.int64, device=self.device)

    # ------------------------------------------------------------------ checks
    def sanity_check(self, ongoing_write_through: Any, ongoing_load_back: Any) -> None:
        evictable = protected = 0
        for node in self.tree.nodes():
            data = node.data[0]
            assert data.value is not None and len(data.value) == node.num_tokens, node
            assert self._nodes.get(node.id) is node, f"{node} is not registered"
            if data.lock_ref:
                protected += node.num_tokens
            else:
                evictable += node.num_tokens
            assert (node in self.tree.leaves) == self.tree.is_evictable_leaf(node), node
        assert (evictable, protected) == (self._evictable, self._protected), (
            f"sizes {(self._evictable, self._protected)} != tree {(evictable, protected)}"
        )
        assert len(self._nodes) == len(list(self.tree.nodes())) + 1

    def pretty_print(self) -> None:
        stack = [(self.tree.root, 0)]
        while stack:
            node, depth = stack.pop()
            lock = node.data[0].lock_ref
            print(f"{'  ' * depth}{node.id} tokens={node.num_tokens} lock_ref={lock}")
            stack.extend((c, depth + 1) for c in node.children.values())
