"""SGLang's SWA host windows on the uniradix TreeCore: HiCache on a FULL+SWA cache.

A node's SWA value (`data[SWA_INDEX]`) gets a host copy too (`host_value`, SGLang's SWA host
pool indices). Semantics are those of SGLang's Python core (`UnifiedTreeCore` with its
`SWAComponent`), so its controller gets the same answers from both:

- a backup of a node copies, besides its full KV, the SWA of the nodes in the window ending
  at it that hold SWA on the device only; a node already backed up is backed up again when
  its window has such nodes (an insert ending there asks for it);
- a load-back restores, besides the evicted bottom of the path, the SWA window ending at the
  anchor from the host copies of the nodes whose SWA left the device; the controller maps
  the loaded SWA slots to their full slots (`RebuildFullToSWAMapping`);
- when a node's full KV leaves the device its SWA goes too; a node whose SWA is on the host
  only is listed in the SWA host LRU list, which SGLang's SWA host eviction walks: a host
  leaf goes whole, any other node loses its SWA host copy only;
- a host lock pins the SWA window ending at the node (its host copies), as a device lock
  pins its device values, and keeps those nodes out of the SWA host LRU list;
- a match may end at a node whose window holds SWA on either tier (`best_match_node`); the
  device match needs it on the device (`last_device_node`);
- under write-back, the SWA eviction walk holds an inner window whose node has no host copy
  back for its backup (`host_held_back.py`); a device leaf's window is backed up with the
  leaf before its demote.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer
from sglang.srt.mem_cache.unified_cache.cache_action import RebuildFullToSWAMapping, SWARebuild
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

from uniradix.integrations.sglang.host_lru import HostLru
from uniradix.integrations.sglang.keys import to_slots, to_tensor
from uniradix.integrations.sglang.mamba import MambaTree
from uniradix.integrations.sglang.swa import SWA_INDEX, SwaTree, lock_window
from uniradix.tree.core import TreeCore
from uniradix.tree.node import ComponentData, TreeNode

SWA = ComponentType.SWA
_HOST_UUID = "host_uuid"
_NEEDS_POOL = (
    "uniradix TreeCore: HiCache on an SWA cache needs SGLang's SWA host pool; SGLang's "
    "device-only SWA ring (has_swa_host_pool=False) is not supported yet"
)


class SwaHostTier:
    """The SWA side of the host tier; `host.py` and the walks call it where SWA matters."""

    tree: TreeCore
    device: torch.device
    swa: SwaTree | None
    mamba: MambaTree | None
    enable_hicache: bool
    _write_pending: dict[int, int]
    _load_pending: dict[int, int]
    _has_swa_host_pool = False
    is_write_back: bool

    _node: Callable[[int], TreeNode]  # TreeCoreViews' look-up by id

    if TYPE_CHECKING:  # host_mamba.py

        def _mamba_free_host(self, node: TreeNode, result: Any, counted: bool) -> None: ...

    def _reset_swa_host(self) -> None:
        """Per-tree state; the SWA tree's hooks keep the host LRU list in step."""
        self._swa_lru = HostLru(SWA_INDEX)
        self._swa_host_uuids = itertools.count(1)
        swa = self.swa
        if swa is not None:
            on = self.enable_hicache
            swa.on_drop = self._swa_dropped if on else None
            swa.on_store = self._swa_stored if on else None

    @property
    def has_swa_host_pool(self) -> bool:
        return self._has_swa_host_pool

    @has_swa_host_pool.setter
    def has_swa_host_pool(self, value: bool) -> None:
        # SGLang's cache sets it right after `set_hicache_enabled`.
        if not value and getattr(self, "swa", None) is not None and self.enable_hicache:
            raise NotImplementedError(_NEEDS_POOL)
        self._has_swa_host_pool = bool(value)

    # ------------------------------------------------------------------ LRU hooks
    def _swa_dropped(self, node: TreeNode) -> None:
        """The node's SWA left the device: listed for host eviction if it has a host copy."""
        if node.data[SWA_INDEX].host_value is not None and node not in self._swa_lru:
            self._swa_lru.insert_mru(node)

    def _swa_stored(self, node: TreeNode) -> None:
        """The node's SWA is on the device again: no longer a host-only window."""
        if node in self._swa_lru:
            self._swa_lru.remove(node)

    def _swa_split_host(self, parent: TreeNode, child: TreeNode) -> None:
        old, new = child.data[SWA_INDEX], parent.data[SWA_INDEX]
        new.host_lock_ref = old.host_lock_ref
        if old.host_value is not None:
            n, lru = parent.num_tokens, self._swa_lru
            new.host_value, old.host_value = old.host_value[:n], old.host_value[n:]
            # The prefix sits right behind the part it was cut from, unless host-locked.
            if new.value is None and new.host_lock_ref == 0:
                if child in lru:
                    lru.insert_after(child, parent)
                else:
                    lru.insert_mru(parent)
            if old.value is None and old.host_lock_ref == 0 and child not in lru:
                lru.insert_mru(child)
        # A host lock's boundary marks the segment's older edge, which moves to the parent.
        if old.metadata and _HOST_UUID in old.metadata:
            if new.metadata is None:
                new.metadata = {}
            new.metadata[_HOST_UUID] = old.metadata.pop(_HOST_UUID)

    # ------------------------------------------------------------------ frees
    def _swa_locked(self, node: TreeNode) -> bool:
        data = node.data[SWA_INDEX]
        return bool(data.lock_ref or data.host_lock_ref)

    def _swa_free_device(self, node: TreeNode, result: Any) -> None:
        """The node's full KV leaves the device: its SWA goes with it (counted)."""
        swa = self.swa
        if swa is not None and node.data[SWA_INDEX].value is not None:
            result.tracker[SWA] += swa.drop(node, result.device_frees)

    def _swa_free_host(self, node: TreeNode, result: Any, counted: bool) -> None:
        if self.swa is None:
            return
        data = node.data[SWA_INDEX]
        if data.host_value is None:
            return
        result.host_frees[SWA].append(torch.from_numpy(data.host_value))
        if counted:
            result.tracker[SWA] += len(data.host_value)
        data.host_value = None
        if node in self._swa_lru:
            self._swa_lru.remove(node)

    # ------------------------------------------------------------------ host locks
    def _swa_lock_host(self, node: TreeNode, result: Any) -> None:
        """Pins the host copies of the window ending at `node`, tombstones included."""
        assert self.swa is not None
        window = self.swa.window
        boundary = lock_window(node, window, self._swa_pin_host, _HOST_UUID, self._swa_host_uuids)
        result.set_lock_uuid(SWA, boundary, lock_host=True)

    def _swa_pin_host(self, node: TreeNode, data: ComponentData) -> None:
        """One more host lock: the first takes a host copy out of the host LRU."""
        if data.host_lock_ref == 0 and data.host_value is not None and node in self._swa_lru:
            self._swa_lru.remove(node)
        data.host_lock_ref += 1

    def _swa_unlock_host(self, node: TreeNode, params: Any) -> None:
        boundary, lru = params.get_lock_uuid(SWA, lock_host=True), self._swa_lru
        while node.parent is not None:
            data = node.data[SWA_INDEX]
            if data.host_lock_ref <= 0:
                raise ValueError(f"SWA host lock release on node {node.id} holding none")
            last = data.host_lock_ref == 1
            if last and data.host_value is not None and data.value is None and node not in lru:
                lru.insert_mru(node)
            data.host_lock_ref -= 1
            if last:
                self.tree.update_leaf(node)
            if boundary and data.metadata and data.metadata.get(_HOST_UUID) == boundary:
                return
            node = node.parent

    # ------------------------------------------------------------------ match and insert
    def _swa_match_bounds(self, path: list[TreeNode]) -> tuple[int, int]:
        """How many nodes of `path` (root side first, each on some tier) a match keeps: up to
        the deepest whose window holds SWA on either tier (SGLang's `best_match_node`), and
        up to the deepest with full KV and its window on the device (`last_device_node`); in
        a Mamba cache, where the node's state is on either tier / on the device too."""
        assert self.swa is not None
        window, gates = self.swa.window, self.swa.gates
        state = None if self.mamba is None else self.mamba.index
        run_any = run_device = math.inf  # SWA tokens ending at the node, per tier rule
        best = device = 0
        for i, node in enumerate(path, 1):
            full, data = node.data[0], node.data[SWA_INDEX]
            # A tombstone resets the run; with gates off it still ends a match.
            if data.value is None and data.host_value is None:
                run_any, any_ok = 0, not gates
            else:
                run_any += node.num_tokens
                any_ok = run_any >= window
            if data.value is None:
                run_device, device_ok = 0, not gates
            else:
                run_device += node.num_tokens
                device_ok = run_device >= window
            if state is not None:  # with Mamba, a match ends only at a node with a state
                held = node.data[state]
                any_ok = any_ok and (held.value is not None or held.host_value is not None)
                device_ok = device_ok and held.value is not None
            if any_ok:
                best = i
            if device_ok and full.value is not None:
                device = i
        return best, device

    def _swa_match_extras(self, best: TreeNode, boundary: int, full_kv: int) -> tuple[int, Any]:
        """SGLang's SWA match figures: the host part of the window ending at `best`, and the
        page-aligned full KV hit when it reaches past `boundary` (where a window would hit)."""
        assert self.swa is not None
        ps = self.swa.page_size
        aligned = full_kv // ps * ps
        branching = aligned if aligned > boundary else None
        covered = host = 0
        node = best
        while node.parent is not None and covered < self.swa.window:
            data = node.data[SWA_INDEX]
            if data.value is not None:
                covered += len(data.value)
            elif data.host_value is not None:
                host += len(data.host_value)
                covered += len(data.host_value)
            else:
                break
            node = node.parent
        return host, branching

    def _swa_recover_unevicted(
        self, node: TreeNode, start: int, params: Any, result: Any, actions: list[Any]
    ) -> None:
        """An insert gave the host-only `node` (tokens `start:` of the key) full KV from the
        request's slots: its part in the request's live window gets SWA from them too (the
        older part split off, `node` staying the lower part)."""
        end = start + node.num_tokens
        if node.data[SWA_INDEX].value is not None:
            return
        live = max(start, params.get_evicted_seqlen(SWA))
        if live >= end:
            return
        if live > start:
            self.tree.split(node, live - start)
        full = node.data[0].value
        assert full is not None
        actions.append(SWARebuild(node.id, to_tensor(full, self.device)))
        result.record_adopted_range(SWA, live, end)

    # ------------------------------------------------------------------ backup
    def _swa_unbacked(self, node: TreeNode) -> list[TreeNode]:
        """The nodes of the window ending at `node` with SWA on the device only, deepest
        first; the window stops at a node in flight to the host or holding no SWA."""
        assert self.swa is not None
        covered, out = 0, []
        while node.parent is not None and covered < self.swa.window:
            if node.id in self._write_pending:
                break
            data = node.data[SWA_INDEX]
            value = data.value if data.value is not None else data.host_value
            if value is None:
                break
            covered += len(value)
            if data.value is not None and data.host_value is None:
                out.append(node)
            node = node.parent
        return out

    def _swa_backup_transfers(self, node: TreeNode) -> dict[Any, list[Any]]:
        if self.swa is None:
            return {}
        nodes = self._swa_unbacked(node)
        if not nodes:
            return {}
        nodes.reverse()
        transfer = PoolTransfer(
            name=PoolName.SWA,
            device_indices=torch.cat([cast(torch.Tensor, n.data[SWA_INDEX].value) for n in nodes]),
            nodes_to_load=[n.id for n in nodes],
        )
        return {SWA: [transfer]}

    def _swa_commit_backup(self, node: TreeNode, transfers: list[Any]) -> None:
        transfer = transfers[0]
        if transfer.host_indices is None:
            return
        offset = 0
        for node_id in transfer.nodes_to_load or [node.id]:
            data = self._node(node_id).data[SWA_INDEX]
            if data.value is None or data.host_value is not None:
                raise ValueError(f"commit_backup: node {node_id} has no SWA to back up")
            size = len(data.value)
            data.host_value = to_slots(transfer.host_indices, offset, offset + size)
            offset += size
        if offset != len(transfer.host_indices):
            raise ValueError(
                f"commit_backup: {len(transfer.host_indices)} SWA host slots for {offset}"
            )

    # ------------------------------------------------------------------ load-back
    def _swa_load_transfers(self, node: TreeNode) -> dict[Any, list[Any]]:
        """The host copies of the SWA window ending at `node` that left the device."""
        if self.swa is None:
            return {}
        covered, host, nodes = 0, [], []
        while node.parent is not None and covered < self.swa.window:
            data = node.data[SWA_INDEX]
            if data.value is not None:
                covered += len(data.value)
            else:
                assert data.host_value is not None, f"{node} holds SWA on neither tier"
                host.append(data.host_value)
                nodes.append(node)
                covered += len(data.host_value)
            node = node.parent
        if not host:
            return {}
        host.reverse()
        nodes.reverse()
        transfer = PoolTransfer(
            name=PoolName.SWA,
            host_indices=torch.from_numpy(np.concatenate(host)),
            device_indices=None,
            nodes_to_load=[n.id for n in nodes],
        )
        return {SWA: [transfer]}

    def _swa_commit_load(self, transfers: list[Any], actions: list[Any]) -> None:
        """The loaded SWA slots become the nodes' SWA values; the controller maps them."""
        assert self.swa is not None
        transfer = transfers[0]
        device = transfer.device_indices
        full_chunks, swa_chunks, offset = [], [], 0
        for node_id in transfer.nodes_to_load or ():
            node = self._node(node_id)
            host, full = node.data[SWA_INDEX].host_value, node.data[0].value
            assert host is not None and full is not None and len(full) == len(host), node
            chunk = device[offset : offset + len(host)]
            self.swa.set_value(node, chunk)
            full_chunks.append(to_tensor(full, self.device))
            swa_chunks.append(chunk.clone())
            offset += len(host)
        if full_chunks:
            actions.append(RebuildFullToSWAMapping(full_chunks, swa_chunks))

    def _swa_check_host(self, nodes: list[TreeNode]) -> None:
        """The SWA host LRU list holds exactly the unlocked host-only windows."""
        if self.swa is None:
            return
        host_only = {
            n.id
            for n in nodes
            if n.parent is not None
            and n.data[SWA_INDEX].value is None
            and n.data[SWA_INDEX].host_value is not None
            and not n.data[SWA_INDEX].host_lock_ref
        }
        listed = {n.id for n in self._swa_lru if not n.data[SWA_INDEX].host_lock_ref}
        assert host_only == listed, f"SWA host LRU {sorted(listed)} != {sorted(host_only)}"
