"""`UniradixTreeCore`: SGLang's `UnifiedTreeCoreInterface` on uniradix's radix tree.

SGLang's `UnifiedRadixCache` drives a TreeCore through that interface only; this one keeps
the tree in `uniradix.tree.core.TreeCore` (FULL as component 0, then SWA windows: `swa.py`,
Mamba states: `mamba.py`; the eviction walk: `device_eviction.py`; with HiCache on, the
host tier: `host*.py`). What it does not
cover is refused by name, at build (`check_supported`, `set_hicache_enabled`) or per method.

Semantics follow SGLang's Python core, so both give the same results on the same calls:
duplicates past `prev_prefix_len` are handed back as `FreeDeviceKV`, an eviction walk stops
once the tracker reaches the requested count, a lock pins the node's root path (SWA: the
window only; Mamba: the node's state). An insert that publishes SWA values or caps a path's
Mamba states pauses at SGLang's barrier; `resume_insert` then refreshes the SWA windows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from sglang.srt.mem_cache.base_prefix_cache import (
    DecLockRefResult,
    IncLockRefResult,
    InsertResult,
    MatchResult,
)
from sglang.srt.mem_cache.events import KVCacheEventRecorder
from sglang.srt.mem_cache.unified_cache.cache_action import FreeDeviceKV, FreeDeviceKVFullOnly
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.unified_tree_core_interface import (
    DecSwaLockOnlyResult,
    InsertStepResult,
)

from uniradix.integrations.sglang.device_eviction import DeviceEviction
from uniradix.integrations.sglang.keys import key_units, to_slots
from uniradix.integrations.sglang.mamba import MambaTree
from uniradix.integrations.sglang.receipts import check_receipt
from uniradix.integrations.sglang.refused import check_supported
from uniradix.integrations.sglang.results import match_result
from uniradix.integrations.sglang.swa import SwaTree
from uniradix.integrations.sglang.views import TreeCoreViews
from uniradix.tree.core import TreeCore
from uniradix.tree.node import TreeNode
from uniradix.tree.policy import eviction_policy

FULL, SWA, MAMBA = ComponentType.FULL, ComponentType.SWA, ComponentType.MAMBA
# Actions the controller may batch to the end of an insert; any other one is a barrier.
_DEFERRABLE = (FreeDeviceKV, FreeDeviceKVFullOnly)


class UniradixTreeCore(DeviceEviction, TreeCoreViews):
    """SGLang's unified cache (FULL, SWA, Mamba, with their host tier) on uniradix's tree."""

    supports_rotation_base = False

    def __init__(self, params: Any, components: dict[Any, Any] | None = None) -> None:
        # `components`: SGLang's; their tree-side state is kept here, as its Rust core does.
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
        self.kv_events = KVCacheEventRecorder(
            enabled=params.enable_kv_cache_events,
            page_size=self.page_size,
            dynamo_format=params.dynamo_kv_event_format,
            lora_names=params.kv_event_lora_names,
        )
        self.swa = None
        if SWA in params.tree_components:
            window = params.swa_retain_window
            gates = params.swa_gates_prefix_match
            self.swa = SwaTree(window, self.page_size, gates, self.device)
        self.mamba = None
        if MAMBA in params.tree_components:
            # The checkpoint grid and the per-path cap are settings of SGLang's component.
            mamba = (components or {}).get(MAMBA)
            if mamba is None:
                raise ValueError("a Mamba cache needs SGLang's MambaComponent, got none")
            index = 1 if self.swa is None else 2
            grid, cap = mamba.mamba_checkpoint_grid, mamba.mamba_max_states_per_path
            self.mamba = MambaTree(index, grid, cap)
            if self.swa is not None:
                self.swa.mamba = self.mamba
        # What a match's end needs, checked inside the tree walk (see `match_prefix`).
        self._required = () if self.mamba is None else (self.mamba.index,)
        self._swa_windows = () if self.swa is None else self.swa.match_windows()
        self._policy = eviction_policy(params.eviction_policy.lower())
        self._paused_insert: tuple[TreeNode, InsertResult] | None = None
        self._host_walk = None  # a HiCache insert paused for a backup (host_walks.py)
        self._walk_quota = 0
        self.reset()

    # ------------------------------------------------------------------ tree state
    def reset(self) -> None:
        num_components = 1 + (self.swa is not None) + (self.mamba is not None)
        self.tree = TreeCore(num_components, self.page_size, self._policy, split_hooks=[self])
        if self.swa is not None:
            self.swa.reset(self.tree)
        if self.mamba is not None:
            self.mamba.reset(self.tree)
        self._nodes: dict[int, TreeNode] = {self.tree.root.id: self.tree.root}
        self._reset_host()
        self._evictable = 0
        self._protected = 0
        root = self.tree.root.id
        self._events = self._new_event_nodes()
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
        if value is not None:  # None: a host-only node (HiCache)
            parent.data[0].value, child.data[0].value = value[:split_len], value[split_len:]
        parent.data[0].lock_ref = child.data[0].lock_ref
        self._nodes[parent.id] = parent
        if self.swa is not None:
            self.swa.redistribute_on_split(parent, child, split_len)
        if self._events is not None:
            self._events.split(parent, child, split_len)
        if self.enable_hicache:
            self._split_host(parent, child, split_len)

    # ------------------------------------------------------------------ match
    def match_prefix(self, params: Any) -> Any:
        if self.enable_hicache:
            return self._match_host(params)
        units, ns, num_units = key_units(params.key, self.page_size)
        if num_units == 0:
            return self._empty
        swa, mamba = self.swa, self.mamba
        # SWA with gates on is checked inside the walk (`_swa_windows`), with no call per node.
        validators = () if swa is None or self._swa_windows else (swa.validator(),)
        path, num_accepted, full_len = self.tree.match(
            units, num_units, validators, self._required, self._swa_windows, ns
        )
        if not path:
            return self._empty
        last_visited, device_len = path[-1].id, full_len
        if num_accepted < len(path):  # SWA or Mamba stopped the match short
            # Cut in place (the walk's list is this call's own): no second list per match.
            del path[num_accepted:]
            device_len = 0
            for node in path:  # a loop: `sum` over a generator costs more
                device_len += node.num_tokens
        best = path[-1] if path else self.tree.root
        self.tree.touch_path(path)
        branching = mamba_branching = None
        if swa is not None:
            swa.refresh_window(best)
            # Full KV reaching past the last usable SWA window: where a window would hit.
            branching = full_len if full_len > device_len else None
        if mamba is not None:
            mamba_branching = mamba.matched(best if path else None, full_len, device_len)
        return match_result(device_len, best.id, last_visited, branching, mamba_branching, full_len)

    def set_component_device_value(self, node_id: int, component_type: Any, value: Any) -> None:
        if component_type == SWA and self.swa is not None:
            self.swa.set_value(self._node(node_id), value)
        elif component_type == MAMBA and self.mamba is not None:
            self.mamba.set_value(self._node(node_id), value)
        else:
            raise ValueError(f"the uniradix TreeCore holds no {component_type!r} values to set")

    # ------------------------------------------------------------------ insert
    def begin_insert(self, params: Any) -> Any:
        if self._paused_insert is not None or self._host_walk is not None:
            raise RuntimeError("concurrent insert walks")
        if self.enable_hicache:
            return self._begin_insert_host(params)
        units, ns, num_units = key_units(params.key, self.page_size)
        root = self.tree.root.id
        if num_units == 0:
            done = InsertResult(prefix_len=0, mamba_exist=True, last_device_node=root)
            return InsertStepResult(actions=[], result=done)
        if params.value is None:  # SGLang's own tests insert keys alone: slots = token ids
            value = torch.tensor(units.tolist()[:num_units], dtype=torch.int64)
        else:
            value = params.value
            if value.shape[0] > num_units:  # a slice costs more than the check
                value = value[:num_units]
        result = InsertResult(0)  # positional: SGLang's keyword defaults cost twice as much
        if params.track_adopted_ranges:
            result.adopted_ranges = {}
        actions: list[Any] = []
        swa, floor = self.swa, params.prev_prefix_len
        # The full-only insert needs nothing per reused node (its duplicates are one range).
        if swa is None:
            on_overlap, tail, tail_from = None, 0, 0
        else:
            on_overlap = swa.overlap_hook(value, params, result, actions)
            # A new leaf past the request's SWA eviction floor keeps SWA on its last window
            # only: the tree builds it as that window under an upper node (`commit_leaf`).
            tail, tail_from = swa.window_tail, params.get_evicted_seqlen(SWA)
        target, present, is_new = self.tree.insert(
            units,
            num_units,
            on_overlap,
            params.inserted_len,
            params.priority or 0,
            tail,
            tail_from,
            ns,
        )
        if swa is None and floor < present:
            # The request's slots for tokens the tree held, past its prefix: one range.
            actions.append(FreeDeviceKV(indices=[value[floor:present]]))
        if is_new:
            result.record_adopted_range(FULL, present, num_units)
            self._commit_full(target, present, num_units, value, params)
            if swa is not None:
                upper = target.parent if present + target.num_tokens < num_units else None
                swa.commit_leaf(target, present, params, result, actions, upper)
            # As SGLang's core: the new leaf counts a hit, once SWA has split it (its lowest
            # part only, measured from the walk's end).
            if present + target.num_tokens > params.inserted_len:
                target.hit_count += 1
            # A new leaf holds no lock yet: it joins the evictable leaves (no test needed).
            self.tree.leaves.add(target)
        if self.mamba is not None:
            self.mamba.commit(target, is_new, params, result, actions)
        if self.swa is not None and params.swa_branching_seqlen is not None:
            result.swa_branch_inserted = len(params.key) >= params.swa_branching_seqlen
        result.prefix_len, result.last_device_node = present, target.id
        if _has_barrier(actions):
            # SWA values to publish or a Mamba path cap to apply: the controller does it (a
            # barrier in SGLang's walk) before the SWA windows refresh.
            self._paused_insert = (target, result)
            return InsertStepResult(actions=actions)
        self._refresh_after_insert(target)
        return InsertStepResult(actions=actions, result=result)

    def _commit_full(
        self, leaf: TreeNode, start: int, stop: int, value: torch.Tensor, params: Any
    ) -> None:
        """A new leaf (tokens `start:stop`, its upper node's too if the tree built it in two)
        takes the request's slots; registered parent last, as a split would register it."""
        slots = to_slots(value, start)
        self._evictable += stop - start
        if start + leaf.num_tokens == stop:
            leaf.data[0].value = slots
            self._nodes[leaf.id] = leaf
            if self._events is not None:
                self._events.stored(leaf, params.key, start, params.session_id)
            return
        upper = leaf.parent
        assert upper is not None
        cut = upper.num_tokens
        upper.data[0].value, leaf.data[0].value = slots[:cut], slots[cut:]
        self._nodes[leaf.id] = leaf
        self._nodes[upper.id] = upper
        if self._events is not None:
            self._events.stored_tailed(upper, leaf, params.key, start, params.session_id)

    def _refresh_after_insert(self, target: TreeNode) -> None:
        if self.swa is not None and target.parent is not None:
            self.swa.refresh_window(target)

    def resume_insert(self) -> Any:
        if self._host_walk is not None:
            return self._resume_insert_host()
        if self._paused_insert is None:
            raise RuntimeError("no insert to resume")
        target, result = self._paused_insert
        self._paused_insert = None
        self._refresh_after_insert(target)
        return InsertStepResult(actions=[], result=result)

    def has_ongoing_insert(self) -> bool:
        return self._paused_insert is not None or self._host_walk is not None

    def end_insert(self) -> list[Any]:
        # Every action was handed out with its step; an abandoned pause is dropped.
        self._paused_insert = self._host_walk = None
        return []

    # ------------------------------------------------------------------ locks
    def _lock_path(self, node: TreeNode, delta: int) -> int:
        """Adds `delta` (+1/-1) to every full lock on the root path; returns tokens that
        changed between evictable and protected."""
        if self.enable_hicache:
            return self._lock_path_host(node, delta)
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
        node, skipped = self._node(node_id), tuple(skip_lock_components)
        result = IncLockRefResult(node_id=node_id, skipped_lock_components=skipped)
        if FULL not in skipped:
            result.delta = self._lock_path(node, +1)
        if self.swa is not None and SWA not in skipped:
            result.set_lock_uuid(SWA, self.swa.lock(node))
        if self.mamba is not None and MAMBA not in skipped:
            self.mamba.lock(node)
        self.tree.update_leaf(node)
        return result

    def dec_lock_ref(self, node_id: int, params: Any, skip_swa: bool = False) -> Any:
        check_receipt(node_id, params)
        node, skipped = self._node(node_id), params.skipped_lock_components
        # After an early SWA release (`dec_swa_lock_only`) the SWA part, and the Mamba part
        # below it in priority, are already gone.
        early = skip_swa and self.swa is not None
        if self.mamba is not None and MAMBA not in skipped and not early:
            self.mamba.unlock(node)
        if self.swa is not None and SWA not in skipped and not early:
            self.swa.unlock(node, params.get_lock_uuid(SWA))
        if FULL not in skipped:
            self._lock_path(node, -1)
        else:
            self.tree.update_leaf(node)
        return DecLockRefResult()

    def dec_swa_lock_only(self, node_id: int, params: Any) -> Any:
        check_receipt(node_id, params)
        result = DecSwaLockOnlyResult()
        node = self._node(node_id)
        if self.swa is not None and node.parent is not None:
            self.swa.release_window(node, params.get_lock_uuid(SWA), result.device_frees)
            if self.mamba is not None and MAMBA not in params.skipped_lock_components:
                self.mamba.unlock(node)
        return result

    def inc_full_pin(self, node_id: int) -> None:
        self._lock_path(self._node(node_id), +1)

    def dec_full_pin(self, node_id: int) -> None:
        self._lock_path(self._node(node_id), -1)


def _has_barrier(actions: list[Any]) -> bool:
    """Whether an action must reach the controller before the walk goes on."""
    for action in actions:  # noqa: SIM110 (`any` over a generator costs more than the loop)
        if not isinstance(action, _DEFERRABLE):
            return True
    return False
