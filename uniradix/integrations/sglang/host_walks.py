"""The match and insert walks of the uniradix TreeCore when SGLang's HiCache is on (FULL).

They differ from the device-tier walks of `core.py` where a path reaches host-only nodes:
a match goes through them (they are host hits, `host_hit_length`, and `best_match_node` is
the deepest of them, from which SGLang loads back); an insert gives them device values again
from the request's slots (no duplicate to free there) and, under write-through, asks the
controller to back up each node whose hit count reaches the threshold. SGLang's controller
runs such a backup at once, before the walk goes on (it may evict host copies the walk would
reach), so the insert is a generator paused at each backup, as SGLang's walk is at its
barriers. Semantics are those of SGLang's Python core (`insert_host`, the walk that hangs a
path prefetched from storage, is in `host_storage.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from sglang.srt.disaggregation.kv_events import StorageMedium
from sglang.srt.mem_cache.base_prefix_cache import InsertResult, MatchResult
from sglang.srt.mem_cache.unified_cache.cache_action import (
    FreeDeviceKV,
    FreeDeviceKVFullOnly,
    UpdatePendingBackupOnNodeSplit,
)
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.unified_tree_core_interface import InsertStepResult

from uniradix.integrations.sglang.host_transfers import HostTransfers
from uniradix.integrations.sglang.keys import to_slots, to_uniradix_key
from uniradix.key import UNIT_BYTES, RadixKey, common_prefix_len
from uniradix.tree.node import TreeNode

FULL = ComponentType.FULL
CPU, GPU = StorageMedium.CPU, StorageMedium.GPU
_DEFERRABLE = (FreeDeviceKV, FreeDeviceKVFullOnly, UpdatePendingBackupOnNodeSplit)


class HostWalks(HostTransfers):
    page_size: int
    _empty: Any
    _host_walk: Iterator[Any] | None

    # ------------------------------------------------------------------ match
    def _match_host(self, params: Any) -> Any:
        key, num_units = to_uniradix_key(params.key, self.page_size)
        if num_units == 0:
            return self._empty
        walk = self.tree.match(key, num_units, ())
        path, matched = walk.path, walk.matched_len
        for i, node in enumerate(path):  # a node on neither tier ends the walk, as SGLang's
            data = node.data[0]
            if data.value is None and data.host_value is None:
                matched -= sum(n.num_tokens for n in path[i:])
                path = path[:i]
                break
        if not path:
            return self._empty
        if self.swa is not None:
            return self._match_host_swa(path, matched)
        if self.mamba is not None:
            return self._match_host_mamba(path, matched)
        device_len, last_device = 0, self.tree.root
        for node in path:  # the device part of a path is its top (eviction takes leaves)
            if node.data[0].value is None:
                break
            device_len += node.num_tokens
            last_device = node
        self.tree.touch_path(path)
        best = path[-1]
        return MatchResult(
            device_prefix_len=device_len,
            last_device_node=last_device.id,
            last_host_node=best.id,
            best_match_node=best.id,
            last_visited_node_id=best.id,
            host_hit_length=matched - device_len,  # every node below holds a host copy
            full_kv_hit_length=matched,
            cache_actions=self._take_split_actions(),
        )

    def _match_host_swa(self, path: list[TreeNode], matched: int) -> Any:
        """As `_match_host`, where the match may end only at a node whose SWA window holds
        (on either tier; on the device for the device part): SGLang's validators."""
        swa = self.swa
        assert swa is not None
        num_best, num_device = self._swa_match_bounds(path)

        def extras(best: TreeNode | None, boundary: int) -> dict[str, Any]:
            if best is not None:
                swa.refresh_window(best)
            host, branching = self._swa_match_extras(best or self.tree.root, boundary, matched)
            figures = {"swa_host_hit_length": host, "swa_branching_seqlen": branching}
            if self.mamba is not None:
                figures.update(self._mamba_match_figures(best, boundary, matched))
            return figures

        return self._host_match(path, matched, num_best, num_device, extras)

    def _host_match(
        self,
        path: list[TreeNode],
        matched: int,
        num_best: int,
        num_device: int,
        extras: Callable[[TreeNode | None, int], dict[str, Any]],
    ) -> Any:
        """The result of a match of `matched` units along `path` whose usable end
        (`num_best` nodes) and device end (`num_device`) a component's rule chose: the host
        hit counts the full host copies between the two; `extras(best, boundary)` gives the
        component's own figures (`best`: None at the root; `boundary`: device match plus
        host hit), once the path up to `best` is touched."""
        root = self.tree.root
        best = path[num_best - 1] if num_best else root
        last_device = path[num_device - 1] if num_device else root
        device_len = sum(n.num_tokens for n in path[:num_device])
        host_hit = sum(
            len(n.data[0].host_value)
            for n in path[num_device:num_best]
            if n.data[0].host_value is not None
        )
        self.tree.touch_path(path[:num_best])
        figures = extras(best if num_best else None, device_len + host_hit)
        return MatchResult(
            device_prefix_len=device_len,
            last_device_node=last_device.id,
            last_host_node=best.id,
            best_match_node=best.id,
            last_visited_node_id=path[-1].id,
            host_hit_length=host_hit,
            full_kv_hit_length=matched,
            cache_actions=self._take_split_actions(),
            **figures,
        )

    # ------------------------------------------------------------------ insert
    def _begin_insert_host(self, params: Any) -> Any:
        key, num_units = to_uniradix_key(params.key, self.page_size)
        if num_units == 0:
            done = InsertResult(prefix_len=0, mamba_exist=True, last_device_node=self.tree.root.id)
            return InsertStepResult(actions=[], result=done)
        if params.value is None:  # SGLang's own tests insert keys alone: slots = token ids
            value = torch.tensor(key.tolist()[:num_units], dtype=torch.int64)
        else:
            value = params.value[:num_units]
        self._host_walk = self._insert_walk(params, key, num_units, value)
        return self._resume_insert_host()

    def _resume_insert_host(self) -> Any:
        assert self._host_walk is not None
        step = next(self._host_walk)
        if step.result is not None:
            self._host_walk = None
        return step

    def _insert_walk(
        self, params: Any, key: RadixKey, num_units: int, value: torch.Tensor
    ) -> Iterator[Any]:
        tree, units, ns = self.tree, key.units, key.extra_key
        end = num_units * UNIT_BYTES
        floor, seen, priority = params.prev_prefix_len, params.inserted_len, params.priority or 0
        result = InsertResult(
            prefix_len=0, adopted_ranges={} if params.track_adopted_ranges else None
        )
        actions: list[Any] = []
        swa = self.swa
        node, off = tree.root, 0
        while off < num_units:
            step = self._step_down(node, key, off, end, actions)
            if step is None:
                break
            child, p = step
            child.priority = max(child.priority, priority)
            if child.data[0].value is None:  # host-only: the request's slots become its KV
                self._unevict(child, value, off, p, params.session_id)
                result.record_adopted_range(FULL, off, off + p)
                if swa is not None:  # `child` stays the part the walk goes on from
                    self._with_split_actions(actions, self._swa_recover_unevicted,
                                             child, off, params, result, actions)  # fmt: skip
                if off + p > seen and self._count_hit(child):
                    actions.append(self._backup_chain(child))
            else:
                # Counted before an SWA split of its older part, which takes the count back.
                hit = off + p > seen and self._count_hit(child)
                if swa is not None:
                    on_overlap = swa.overlap_hook(value, params, result, actions)
                    self._with_split_actions(actions, on_overlap, child, off, p)
                elif floor < off + p:  # the request's duplicates of tokens the tree holds
                    actions.append(FreeDeviceKV(indices=[value[max(floor, off) : off + p]]))
                if hit:
                    actions.append(self._backup_chain(child))
            tree.leaves.refresh(child)
            node, off = child, off + p
            if not all(isinstance(a, _DEFERRABLE) for a in actions):
                yield InsertStepResult(actions=actions)  # the controller backs up now
                actions = []
        target = node
        if off < num_units:
            result.record_adopted_range(FULL, off, num_units)
            target = self._new_leaf(node, units[off * UNIT_BYTES : end], ns, priority)
            target.data[0].value = to_slots(value, off)
            self._evictable += target.num_tokens
            if self._events is not None:
                self._events.stored(target, params.key, off, params.session_id)
            if swa is not None:
                swa.commit_leaf(target, off, params, result, actions)
            tree.update_leaf(target)
        if self.mamba is not None:  # the request's state (the path cap is an action)
            self.mamba.commit(target, target is not node, params, result, actions)
        if not all(isinstance(a, _DEFERRABLE) for a in actions):
            yield InsertStepResult(actions=actions)  # the controller publishes SWA, caps states
            actions = []
        if swa is not None and target is not tree.root:
            swa.refresh_window(target)
        if target is not node:
            # As SGLang's core: the leaf's end as its lowest part (after an SWA split) counts.
            if off + target.num_tokens > seen and self._count_hit(target):
                actions.append(self._backup_chain(target))
        elif self._needs_swa_backup(target) or self._needs_mamba_backup(target):
            # New SWA in its window, or a new state, goes to the host too.
            actions.append(self._backup_chain(target))
        if swa is not None and params.swa_branching_seqlen is not None:
            result.swa_branch_inserted = len(params.key) >= params.swa_branching_seqlen
        result.prefix_len, result.last_device_node = off, target.id
        yield InsertStepResult(actions=actions, result=result)

    def _with_split_actions(self, actions: list[Any], step: Any, *args: Any) -> None:
        """Runs an SWA step that may split a node; the split's actions go where SGLang's
        walk puts them, before the step's own."""
        mark = len(actions)
        step(*args)
        actions[mark:mark] = self._take_split_actions()

    def _needs_swa_backup(self, node: TreeNode) -> bool:
        """A backed-up node, not in flight, whose window holds SWA not yet on the host."""
        return (
            self.swa is not None
            and not self.is_write_back
            and node.data[0].host_value is not None
            and node.id not in self._write_pending
            and bool(self._swa_unbacked(node))
        )

    def _step_down(
        self, node: TreeNode, key: RadixKey, off: int, end: int, actions: list[Any]
    ) -> tuple[TreeNode, int] | None:
        """One step of a host-tier walk (insert, `insert_host`): `node`'s child continuing
        `key` at unit `off` (None: none), touched and, where the key leaves it or ends inside
        it, split (the split's actions go to `actions`); and the units it covers."""
        ps, units, ns = self.page_size, key.units, key.extra_key
        at = off * UNIT_BYTES
        page = units[at : at + ps * UNIT_BYTES]
        child = node.children.get(page if ns is None else (ns, page))
        if child is None:
            return None
        child.last_access_time = self.tree.tick()
        edge = child.key
        if units.startswith(edge, at, end):
            return child, child.num_tokens
        p = common_prefix_len(edge, units[at : min(at + len(edge), end)])
        p -= p % ps
        child = self.tree.split(child, p)
        actions.extend(self._take_split_actions())
        return child, p

    def _new_leaf(self, parent: TreeNode, edge: bytes, ns: str | None, priority: int) -> TreeNode:
        leaf = self.tree.add_leaf(parent, edge, ns)
        leaf.priority = priority
        self._nodes[leaf.id] = leaf
        return leaf

    def _count_hit(self, node: TreeNode) -> bool:
        """Counts a hit on a node with device KV; whether write-through backs it up now."""
        if self.is_write_back:
            return False
        node.hit_count += 1
        return node.data[0].host_value is None and node.hit_count >= self.write_through_threshold

    def _unevict(
        self, node: TreeNode, value: torch.Tensor, off: int, units: int, session: Any
    ) -> None:
        data = node.data[0]
        data.value = to_slots(value, off, off + units)
        if data.lock_ref:
            self._protected += units
        else:
            self._evictable += units
        self.tree.update_leaf(node)
        if node.parent is not None:
            self.tree.update_leaf(node.parent)
        self._track_duplicate(node)
        if self._events is not None:
            self._events.restored(node, GPU, session)
