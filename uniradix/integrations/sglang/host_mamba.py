"""SGLang's Mamba host states on the uniradix TreeCore: HiCache on a FULL+Mamba cache.

A node's Mamba state (`data[mamba.index]`) gets a host copy too (`host_value`, one slot of
SGLang's Mamba host pool, kept as the controller's tensor). Semantics are those of SGLang's
Python core (`UnifiedTreeCore` with its `MambaComponent`), so its controller gets the same
answers from both:

- a backup of a node copies its state when it has one on the device only; a backed-up node
  that takes a state later (an insert ending there) is backed up again for it;
- a match may end at a node whose state is on either tier (`best_match_node`), the device
  match at one whose state and full KV are on the device; a state on the host only counts
  as a Mamba host hit, and the load-back brings it to the device (and, for a request, into
  the request's own slot);
- a state that leaves the device (Mamba eviction, a demote, the path cap) while its host
  copy lives is listed in the Mamba host LRU list, which SGLang's Mamba host eviction walks:
  a host leaf goes whole, any other node loses its state's host copy only;
- a host lock pins the anchor's state copy (and keeps it out of that list);
- under write-back, the Mamba eviction walk holds an inner state whose node has no host copy
  back for its backup (`host_held_back.py`); a device leaf's state is backed up with the
  leaf before its demote.

With L3 storage, a backup to storage writes a node's state copy under its last page's hash,
and a prefetch's state becomes the host copy of the node its insert ended at.

With SWA too (FULL+SWA+Mamba) a match ends where both hold, an SWA tombstone takes the
node's state and an SWA host eviction its state's host copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer
from sglang.srt.mem_cache.unified_cache.cache_action import FreeComponentHostSlot
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

from uniradix.integrations.sglang.host_lru import HostLru
from uniradix.integrations.sglang.mamba import MambaTree
from uniradix.tree.core import TreeCore
from uniradix.tree.node import TreeNode

MAMBA = ComponentType.MAMBA


class MambaHostTier:
    """The Mamba side of the host tier; `host.py`, the walks and the transfers call it."""

    tree: TreeCore
    mamba: MambaTree | None
    enable_hicache: bool
    _write_pending: dict[int, int]
    _load_pending: dict[int, int]
    _nodes: dict[int, TreeNode]
    is_write_back: bool

    _node: Callable[[int], TreeNode]  # TreeCoreViews' look-up by id
    _host_match: Callable[..., Any]  # host_walks.py: the MatchResult of a bounded match

    def _reset_mamba_host(self) -> None:
        """Per-tree state; the Mamba tree's hooks keep the host LRU list in step."""
        mamba = self.mamba
        if mamba is None:
            return
        self._mamba_lru = HostLru(mamba.index)
        on = self.enable_hicache
        mamba.on_drop = self._mamba_dropped if on else None
        mamba.on_store = self._mamba_stored if on else None

    # ------------------------------------------------------------------ LRU hooks
    def _mamba_dropped(self, node: TreeNode) -> None:
        """The node's state left the device: listed for host eviction if it has a host copy
        (SGLang lists it whatever its host locks; its walk skips the locked)."""
        assert self.mamba is not None
        if node.data[self.mamba.index].host_value is not None and node not in self._mamba_lru:
            self._mamba_lru.insert_mru(node)

    def _mamba_stored(self, node: TreeNode) -> None:
        """The node's state is on the device again: no longer a host-only state."""
        if node in self._mamba_lru:
            self._mamba_lru.remove(node)

    # ------------------------------------------------------------------ frees
    def _mamba_locked(self, node: TreeNode) -> bool:
        assert self.mamba is not None
        data = node.data[self.mamba.index]
        return bool(data.lock_ref or data.host_lock_ref)

    def _mamba_free_device(self, node: TreeNode, result: Any, counted: bool) -> None:
        """The node's state leaves the device (into `result`; `counted`: in its tracker, as
        SGLang counts the tier an eviction is for); a host copy of it stays, listed."""
        mamba = self.mamba
        if mamba is not None and node.data[mamba.index].value is not None:
            freed = mamba.drop(node, result.device_frees)
            if counted:
                result.tracker[MAMBA] += freed

    def _mamba_free_host(self, node: TreeNode, result: Any, counted: bool) -> None:
        mamba = self.mamba
        if mamba is None:
            return
        data = node.data[mamba.index]
        if data.host_value is not None:
            result.host_frees[MAMBA].append(data.host_value)
            if counted:
                result.tracker[MAMBA] += len(data.host_value)
            data.host_value = None
            if node in self._mamba_lru:
                self._mamba_lru.remove(node)

    # ------------------------------------------------------------------ host locks
    def _mamba_lock_host(self, node: TreeNode) -> None:
        """Pins the anchor's state copy (a tombstone's too: the count is kept)."""
        assert self.mamba is not None
        if node.parent is None:
            return
        data = node.data[self.mamba.index]
        if data.host_lock_ref == 0 and data.host_value is not None and node in self._mamba_lru:
            self._mamba_lru.remove(node)
        data.host_lock_ref += 1

    def _mamba_unlock_host(self, node: TreeNode) -> None:
        assert self.mamba is not None
        if node.parent is None:
            return
        data = node.data[self.mamba.index]
        if data.host_lock_ref <= 0:
            raise ValueError(f"Mamba host lock release on node {node.id} holding none")
        data.host_lock_ref -= 1
        if data.host_lock_ref == 0:
            if data.value is None and data.host_value is not None:
                self._mamba_dropped(node)
            self.tree.update_leaf(node)

    # ------------------------------------------------------------------ match
    def _match_host_mamba(self, path: list[TreeNode], matched: int) -> Any:
        """The HiCache match of a Mamba cache: it ends at the deepest node with a state on
        either tier (`best_match_node`), the device match at the deepest with its state and
        full KV on the device. A best node with its state on the host only is a Mamba host
        hit (its load-back brings the state back); the state used is the most recent."""
        mamba = self.mamba
        assert mamba is not None
        index = mamba.index
        num_best = num_device = 0
        for i, node in enumerate(path, 1):
            state = node.data[index]
            if state.value is not None or state.host_value is not None:
                num_best = i
                if state.value is not None and node.data[0].value is not None:
                    num_device = i

        def extras(best: TreeNode | None, boundary: int) -> dict[str, Any]:
            return self._mamba_match_figures(best, boundary, matched)

        return self._host_match(path, matched, num_best, num_device, extras)

    def _mamba_match_figures(
        self, best: TreeNode | None, boundary: int, full_kv: int
    ) -> dict[str, Any]:
        """SGLang's Mamba match figures: a branching point past `boundary` (device match plus
        host hit), and a host hit of one state when `best` holds its state on the host only;
        the state used on the device becomes the most recent."""
        mamba = self.mamba
        assert mamba is not None
        on_device = best is not None and best.data[mamba.index].value is not None
        return {
            "mamba_branching_seqlen": mamba.matched(best if on_device else None, full_kv, boundary),
            "mamba_host_hit_length": int(best is not None and not on_device),
        }

    # ------------------------------------------------------------------ backup
    def _needs_mamba_backup(self, node: TreeNode) -> bool:
        """A backed-up node, not in flight, whose state is on the device only."""
        mamba = self.mamba
        if mamba is None or self.is_write_back:
            return False
        data = node.data[mamba.index]
        return (
            node.data[0].host_value is not None
            and node.id not in self._write_pending
            and data.value is not None
            and data.host_value is None
        )

    def _mamba_backup_transfers(self, node: TreeNode) -> dict[Any, list[Any]]:
        mamba = self.mamba
        if mamba is None:
            return {}
        data = node.data[mamba.index]
        if data.value is None or data.host_value is not None:
            return {}
        return {MAMBA: [PoolTransfer(name=PoolName.MAMBA, device_indices=data.value)]}

    def _mamba_commit_backup(self, node: TreeNode, transfers: list[Any]) -> None:
        assert self.mamba is not None
        host = transfers[0].host_indices if transfers else None
        data = node.data[self.mamba.index]
        if host is not None and data.host_value is None:
            data.host_value = host.clone()

    # ------------------------------------------------------------------ load-back
    def _mamba_load_transfers(self, node: TreeNode, req: Any) -> dict[Any, list[Any]]:
        """The anchor's state copy, when it left the device: into a new device slot for the
        node and, for a request, into the request's own slot too."""
        mamba = self.mamba
        if mamba is None:
            return {}
        data = node.data[mamba.index]
        if data.value is not None or data.host_value is None:
            return {}
        transfers = [
            PoolTransfer(name=PoolName.MAMBA, host_indices=data.host_value, nodes_to_load=[node.id])
        ]
        slot = req.kv.mamba_pool_idx if req is not None else None
        if slot is not None:
            transfers.append(
                PoolTransfer(
                    name=PoolName.MAMBA,
                    host_indices=data.host_value,
                    device_indices=slot.unsqueeze(0),
                )
            )
        return {MAMBA: transfers}

    def _mamba_commit_load(self, node: TreeNode, transfers: list[Any]) -> None:
        assert self.mamba is not None
        device = transfers[0].device_indices if transfers else None
        if device is not None:
            self.mamba.set_value(node, device.clone())

    # ------------------------------------------------------------------ L3 storage
    def _mamba_storage_backup(self, node: TreeNode, hashes: list[str] | None) -> list[Any]:
        """A backup to storage writes the node's state copy under its last page's hash."""
        mamba = self.mamba
        host = None if mamba is None else node.data[mamba.index].host_value
        if host is None or not hashes:
            return []
        trailing = PoolHitPolicy.TRAILING_PAGES
        return [
            PoolTransfer(PoolName.MAMBA, host_indices=host, keys=[hashes[-1]], hit_policy=trailing)
        ]

    def _mamba_commit_prefetch(
        self, transfers: list[Any], actions: list[Any], inserted: Any, pools: Any
    ) -> None:
        """A prefetch's state (staged in the Mamba host pool) becomes the host copy of the
        node the prefetch's insert ended at, unless storage lacked it or that node holds one
        already: then its slot is freed and the insert counts as `mamba_exist`."""
        if not transfers:
            return
        assert self.mamba is not None
        host = transfers[0].host_indices
        loaded = pools is not None and pools.extra_pool_hit_pages.get(PoolName.MAMBA, 0) >= 1
        node_id = None if inserted is None else inserted.inserted_host_node
        node = None if node_id is None else self._node(node_id)
        if (
            host is None
            or node is None
            or not loaded
            or node.data[self.mamba.index].host_value is not None
        ):
            actions.append(FreeComponentHostSlot([host], component_type=MAMBA))
            if inserted is not None:
                inserted.mamba_exist = True
            return
        node.data[self.mamba.index].host_value = host.clone()
        self._mamba_dropped(node)  # listed while its state is on the host only
        if inserted is not None:
            inserted.mamba_exist = False

    def _mamba_check_host(self) -> None:
        """Every state listed for host eviction is on the host only."""
        mamba = self.mamba
        if mamba is None:
            return
        for node in self._mamba_lru:
            data = node.data[mamba.index]
            assert data.value is None and data.host_value is not None, node

    def _mamba_host_without_full(self, node: TreeNode) -> bool:
        """A state copy on the host under a node whose full KV has none (write-through
        keeps the full copy under every host copy)."""
        mamba = self.mamba
        return (
            mamba is not None
            and node.data[0].host_value is None
            and node.data[mamba.index].host_value is not None
        )
