"""The read-only side of the uniradix TreeCore: node look-ups and values, SGLang's size
ledgers, flattened values, the sanity check and the debug print. Kept apart from `core.py`,
which mutates the tree."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.unified_tree_core_interface import (
    RadixCacheWalkResult,
    TreePathNodeInfo,
)

from uniradix.integrations.sglang.keys import key_units, to_tensor
from uniradix.integrations.sglang.mamba import MambaTree
from uniradix.integrations.sglang.refused import RefusedTreeCoreMethods
from uniradix.integrations.sglang.swa import SWA_INDEX, SwaTree
from uniradix.key import UNIT_BYTES
from uniradix.tree.core import TreeCore
from uniradix.tree.node import TreeNode
from uniradix.tree.walk import shared_pages, walker

FULL, SWA, MAMBA = ComponentType.FULL, ComponentType.SWA, ComponentType.MAMBA


class TreeCoreViews(RefusedTreeCoreMethods):
    """Look-ups, sizes and checks, read from the tree and the ledgers `core.py` keeps."""

    device: torch.device
    tree: TreeCore
    swa: SwaTree | None
    mamba: MambaTree | None
    _nodes: dict[int, TreeNode]
    _evictable: int
    _protected: int
    _empty: Any
    _check_host: Callable[[list[TreeNode]], None]  # host.py: the host tier's invariants

    def _node(self, node_id: int) -> TreeNode:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise KeyError(f"node {node_id} is not in the uniradix tree") from None

    def _aux(self, component_type: Any) -> SwaTree | MambaTree | None:
        """The tree side of an auxiliary component this core holds (None: not held)."""
        if component_type == SWA:
            return self.swa
        return self.mamba if component_type == MAMBA else None

    def _index(self, component_type: Any) -> int | None:
        """The tree's component index of SGLang's component type (None: not held)."""
        if component_type == FULL:
            return 0
        aux = self._aux(component_type)
        if aux is None:
            return None
        return SWA_INDEX if isinstance(aux, SwaTree) else aux.index

    def is_root(self, node_id: int) -> bool:
        return node_id == self.tree.root.id

    def root_node_handle(self, extra_key: str | None = None) -> int:
        return self.tree.root.id

    def supports_fast_match_prefix(self) -> bool:
        return True

    @property
    def empty_match_result(self) -> Any:
        return self._empty

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
        node, index = self._node(node_id), self._index(component_type)
        value = None if index is None else node.data[index].value
        if value is None or index:  # SWA and Mamba values are the controller's tensors
            return value
        return to_tensor(value, self.device)

    def evictable_size(self) -> int:
        return self._evictable

    def protected_size(self) -> int:
        return self._protected

    def full_evictable_size(self) -> int:
        return self._evictable

    def full_protected_size(self) -> int:
        return self._protected

    def component_evictable_size(self, component_type: Any) -> int:
        if component_type == FULL:
            return self._evictable
        aux = self._aux(component_type)
        return 0 if aux is None else aux.evictable

    def component_protected_size(self, component_type: Any) -> int:
        if component_type == FULL:
            return self._protected
        aux = self._aux(component_type)
        return 0 if aux is None else aux.protected

    def swa_evictable_size(self) -> int:
        return self.component_evictable_size(SWA)

    def swa_protected_size(self) -> int:
        return self.component_protected_size(SWA)

    def mamba_evictable_size(self) -> int:
        return self.component_evictable_size(MAMBA)

    def mamba_protected_size(self) -> int:
        return self.component_protected_size(MAMBA)

    def total_size(self) -> tuple[int, int]:
        """(full tokens, auxiliary tokens) over the whole tree."""
        aux = 0
        for index in range(1, self.tree.num_components):
            aux += sum(len(v) for n in self.tree.nodes() if (v := n.data[index].value) is not None)
        return self._evictable + self._protected, aux

    def _flatten(self, index: int) -> torch.Tensor:
        kept: list[Any] = [v for n in self.tree.nodes() if (v := n.data[index].value) is not None]
        if not kept:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        if index:  # SWA and Mamba values are the controller's tensors
            return torch.cat(kept)
        return to_tensor(np.concatenate(kept), self.device)

    def all_values_flatten(self) -> torch.Tensor:
        return self._flatten(0)

    def all_mamba_values_flatten(self) -> torch.Tensor:
        if self.mamba is None:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        return self._flatten(self.mamba.index)

    def match_full_device_prefix(self, key: Any) -> tuple[int, int, int]:
        """A match of the full KV on the device alone, read only (no split, no access time,
        whatever SWA or Mamba hold): tokens matched (whole pages), the deepest node reached
        and the tokens of its root path (a match ending inside a node counts all of it)."""
        units, ns, num_units = key_units(key, self.page_size)
        num_bytes, page_bytes = num_units * UNIT_BYTES, self.page_size * UNIT_BYTES
        path, off, diverged = walker()(self.tree.root, units, num_bytes, page_bytes, ns)
        node, matched = self.tree.root, 0
        for child in path:
            if child.data[0].value is None:
                return matched, node.id, matched
            node, matched = child, matched + child.num_tokens
        if diverged is not None and diverged.data[0].value is not None:
            shared = shared_pages(diverged, units, off, num_bytes, self.page_size)
            if shared:
                return matched + shared, diverged.id, matched + diverged.num_tokens
        return matched, node.id, matched

    # ------------------------------------------------------------------ scheduling walks
    def dfs_weight_order(self, node_ids: Sequence[int]) -> list[int]:
        """The indices of `node_ids` (a waiting queue's last nodes), depth first through the
        tree: heavier subtrees first (a subtree weighs the requests ending in it), ties in
        the children's order, a node's own requests after its subtree's. SGLang's
        `dfs-weight` scheduling policy: requests sharing a prefix run together. Only the
        paths to the given nodes are walked, not the whole tree."""
        ending: dict[TreeNode, list[int]] = {}
        for index, node_id in enumerate(node_ids):
            ending.setdefault(self._node(node_id), []).append(index)
        weight: dict[TreeNode, int] = {}
        for end, indices in ending.items():
            node: TreeNode | None = end
            while node is not None:
                weight[node] = weight.get(node, 0) + len(indices)
                node = node.parent
        order: list[int] = []
        stack = [(self.tree.root, False)]
        while stack:
            node, below_done = stack.pop()
            if below_done:
                order += ending.get(node, ())
                continue
            stack.append((node, True))
            heavier_first = sorted(
                (c for c in node.children.values() if c in weight), key=lambda c: -weight[c]
            )
            stack += [(child, False) for child in reversed(heavier_first)]
        return order

    def collect_path_info(self, end_node_ids: Sequence[int]) -> tuple[tuple[Any, ...], ...]:
        """Each node's root path (root excluded, root side first): per node its id, its
        parent's, its tokens' span from the root, its device slots' count (None: not on the
        device) and its children's count. An unknown id raises KeyError."""
        paths = []
        for node_id in end_node_ids:
            path: list[TreeNode] = []
            node = self._node(node_id)
            while node.parent is not None:
                path.append(node)
                node = node.parent
            start, infos = 0, []
            for node in reversed(path):
                value = node.data[0].value
                end = start + node.num_tokens
                parent = node.parent.id if node.parent is not None else node.id
                slots = None if value is None else len(value)
                infos.append(
                    TreePathNodeInfo(node.id, parent, start, end, slots, len(node.children))
                )
                start = end
            paths.append(tuple(infos))
        return tuple(paths)

    def walk_for_kv_canary(self, unlocked_only: bool, swa_resident_only: bool) -> Any:
        """Every FULL device slot as a row (slot, position on its path, the slot before it
        there; -1 first), depth first in the children's order: SGLang's KV-canary sweep.
        `unlocked_only` leaves out the nodes a request holds (by their SWA lock when the SWA
        filter applies, else the full one); `swa_resident_only`, on an SWA cache, the nodes
        without SWA. A node left out still counts for its descendants' positions and the
        slot before their first."""
        swa_only = swa_resident_only and self.swa is not None
        lock_index = SWA_INDEX if swa_only else 0
        slots: list[np.ndarray] = []
        positions: list[np.ndarray] = []
        before: list[np.ndarray] = []
        stack = [(self.tree.root, 0, -1)]
        while stack:
            node, depth, last = stack.pop()
            value = node.data[0].value
            if value is not None and len(value):
                if (
                    node.parent is not None
                    and not (unlocked_only and node.data[lock_index].lock_ref)
                    and not (swa_only and node.data[SWA_INDEX].value is None)
                ):
                    slots.append(value)
                    positions.append(np.arange(depth, depth + len(value)))
                    before.append(np.concatenate(([last], value[:-1])))
                last = int(value[-1])
            below = depth + node.num_tokens  # the root's key is empty
            stack += [(child, below, last) for child in reversed(node.children.values())]
        return RadixCacheWalkResult(
            slot_indices=_int64(slots),
            positions=_int64(positions),
            prev_slot_indices=_int64(before),
        )

    def sanity_check(self, ongoing_write_through: Any, ongoing_load_back: Any) -> None:
        evictable = protected = 0
        nodes = list(self.tree.nodes())
        for node in nodes:
            data = node.data[0]
            assert self._nodes.get(node.id) is node, f"{node} is not registered"
            for slots in (data.value, data.host_value):
                assert slots is None or len(slots) == node.num_tokens, node
            if data.value is None:  # host-only (HiCache): in neither device ledger
                assert self.tree.host_only_nodes and data.host_value is not None, node
            elif data.lock_ref:
                protected += node.num_tokens
            else:
                evictable += node.num_tokens
            assert (node in self.tree.leaves) == self.tree.is_evictable_leaf(node), node
        assert (evictable, protected) == (self._evictable, self._protected), (
            f"sizes {(self._evictable, self._protected)} != tree {(evictable, protected)}"
        )
        assert len(self._nodes) == len(nodes) + 1
        if self.tree.host_only_nodes:
            self._check_host(nodes)
        if self.swa is not None:
            self.swa.check(nodes)
        if self.mamba is not None:
            self.mamba.check(nodes)

    def pretty_print(self) -> None:
        stack = [(self.tree.root, 0)]
        while stack:
            node, depth = stack.pop()
            locks = [d.lock_ref for d in node.data]
            print(f"{'  ' * depth}{node.id} tokens={node.num_tokens} lock_refs={locks}")
            stack.extend((c, depth + 1) for c in node.children.values())


def _int64(parts: list[np.ndarray]) -> torch.Tensor:
    """The parts end to end as one int64 tensor (empty: none)."""
    if not parts:
        return torch.empty(0, dtype=torch.int64)
    return torch.from_numpy(np.concatenate(parts).astype(np.int64, copy=False))
