"""The tree side of SGLang's Mamba component, on uniradix's tree (the last component index).

A Mamba state is one slot of SGLang's Mamba pool holding the recurrent state after a node's
last token; what SGLang's Python core keeps of it on tree nodes is done here, with its
semantics:

- a match may end only at a node that holds a state; the state used becomes the most recent
  of the Mamba LRU (its ancestors do not);
- a new leaf takes the inserting request's state; an existing node without one takes it
  (through `set_value`), and one with a state keeps its own (`mamba_exist`: the request frees
  its copy); each commit may cap the states on the path (`evict_excess_path_states`, run by
  the controller's `MambaEvictExcessPathStates`);
- a lock holds the anchor's state only; a split leaves the state on the lower part;
- Mamba eviction walks its LRU (`walk.py`): an evictable leaf goes to the controller (whole
  node), any other node loses its state (a tombstone). An SWA tombstone takes the node's
  state with it.

States are kept as the controller hands them: the tensor itself, as SGLang's cores keep it
(the controller hands it over with the insert or `set_value`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from sglang.srt.mem_cache.unified_cache.cache_action import MambaEvictExcessPathStates
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

from uniradix.integrations.sglang.ledger import ComponentLedger
from uniradix.integrations.sglang.walk import LruEvictionWalk
from uniradix.tree.core import TreeCore
from uniradix.tree.lru import LRUList
from uniradix.tree.node import TreeNode

MAMBA = ComponentType.MAMBA


class MambaTree(ComponentLedger, LruEvictionWalk):
    def __init__(self, index: int, grid: int, cap: int) -> None:
        self.index = index
        self.grid = grid  # depths a state may sit at: multiples of this (SGLang's checkpoint grid)
        self.cap = cap  # states kept on one root path; negative: no cap
        # The host tier's hooks (`host_mamba.py`): a node's state left / reached the device; the
        # walk's `backup_first` (write-back) is set there too.
        self.on_drop: Callable[[TreeNode], None] | None = None
        self.on_store: Callable[[TreeNode], None] | None = None

    def reset(self, tree: TreeCore) -> None:
        self.tree = tree
        self.lru = LRUList(self.index, tree.num_components)
        self.evictable = 0
        self.protected = 0
        self.evict_end()

    def tensor(self, node: TreeNode) -> torch.Tensor:
        value: torch.Tensor | None = node.data[self.index].value  # type: ignore[assignment]
        assert value is not None, f"{node} has no Mamba state"
        return value

    def matched(self, best: TreeNode | None, full_hit: int, device_len: int) -> int | None:
        """A match used `best`'s state (None: no state): it becomes the most recent. Returns
        the deepest grid depth inside the full KV hit past the usable state, if any."""
        if best is not None:
            self.lru.move_to_mru(best)  # a match ends only at a node holding a state
        aligned = full_hit // self.grid * self.grid
        return aligned if aligned > device_len else None

    def set_value(self, node: TreeNode, value: torch.Tensor) -> None:
        data = node.data[self.index]
        if data.value is not None:
            raise ValueError(f"node {node.id} already holds a Mamba state")
        if self.on_store is not None:
            self.on_store(node)
        self.store(node, value)

    def commit(
        self, node: TreeNode, is_new: bool, params: Any, result: Any, actions: list[Any]
    ) -> None:
        if params.mamba_value is None:
            raise ValueError("an insert into a Mamba cache needs params.mamba_value, got None")
        data = node.data[self.index]
        if is_new or data.value is None:
            self.set_value(node, params.mamba_value)
            if not is_new:
                self._touch(node)
            if self.cap >= 0:
                actions.append(MambaEvictExcessPathStates(node.id))
            return
        self.lru.move_to_mru(node)
        self._touch(node)
        result.mamba_exist = True

    def _touch(self, node: TreeNode) -> None:
        node.last_access_time = self.tree.tick()
        self.tree.leaves.refresh(node)

    def drop(self, node: TreeNode, device_frees: dict[Any, list[torch.Tensor]]) -> int:
        size = self.release(node, self.tensor(node), MAMBA, device_frees)
        if self.on_drop is not None:
            self.on_drop(node)
        return size

    # ------------------------------------------------------------------ locks
    def lock(self, node: TreeNode) -> None:
        if node.parent is not None:
            self.pin(node, node.data[self.index])

    def unlock(self, node: TreeNode) -> None:
        if node.parent is not None:
            self.unpin(node, node.data[self.index], "Mamba")

    # ------------------------------------------------------------------ eviction
    def tombstone(
        self, node: TreeNode, device_frees: dict[Any, list[torch.Tensor]], tracker: dict[Any, int]
    ) -> None:
        tracker[MAMBA] += self.drop(node, device_frees)

    def evict_excess(self, tail: TreeNode, device_frees: dict[Any, list[torch.Tensor]]) -> None:
        """Drops the shallowest states past the per-path cap; the tail, forks, locked states
        and evictable leaves keep theirs (a soft cap, as SGLang's)."""
        if self.cap < 0:
            return
        i = self.index
        holders: list[TreeNode] = []
        node = tail
        while node.parent is not None:  # the root path, without a generator's frame per step
            if node.data[i].value is not None:
                holders.append(node)
            node = node.parent
        excess = len(holders) - self.cap
        for node in reversed(holders):
            if excess <= 0 or node is tail:
                return
            if node.data[i].lock_ref > 0 or len(node.children) != 1 or node in self.tree.leaves:
                continue
            self.drop(node, device_frees)
            self.tree.update_leaf(node)
            excess -= 1

    def check(self, nodes: list[TreeNode]) -> None:
        """SGLang's sanity check, Mamba part: ledgers and LRU membership match the nodes."""
        self.check_ledger(nodes, "Mamba")
