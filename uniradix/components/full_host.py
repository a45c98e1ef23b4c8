"""HostFullComponent: full-attention KV with a host half (the L2 tier's view of a node).

A node's full KV is on the device (`value`), on the host (`host_value`) or both:

    device-only  value=slots  host_value=None   (not backed up)
    backed       value=slots  host_value=slots  (a device eviction demotes it)
    host-only    value=None   host_value=slots  (demoted: matchable, loaded back on use)

Device data is a prefix of every path (a child on the device has its parent on the device),
so a match walk reads `[device nodes..., host-only nodes...]`: the device hit is usable now,
the host hit after a load-back. Host-only leaves that are not pinned (`host_lock_ref`) form
the host eviction set, ordered by the cache's eviction policy like the device leaves.

Like every component it frees nothing: demotion appends the device `FreeSlots`, host
eviction returns the host slots, and the tier controller (`uniradix.tiers.controller`) gives
them back to their pools.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from uniradix.components.base import TreeComponent
from uniradix.components.full import FullComponent
from uniradix.tree.acceptance import Validator
from uniradix.tree.core import MatchWalk, TreeCore
from uniradix.tree.leaves import EvictableLeaves
from uniradix.tree.node import TreeNode
from uniradix.types import CacheSettings, FreeSlots, InsertContext, MatchPrefixParams, Slots


def _on_device(node: TreeNode) -> bool:
    return node.data[0].value is not None


class HostFullComponent(FullComponent):
    def __init__(self, index: int, tree: TreeCore, settings: CacheSettings) -> None:
        if index != 0:
            raise ValueError(f"the full component must come first, got index {index}")
        super().__init__(index, tree, settings)
        self.host_leaves = EvictableLeaves(tree.leaves.policy)
        self.host_tokens = 0  # host slots held by the tree
        self.aux_hosts: list[Any] = []
        self.last_best: TreeNode | None = None  # the last match's end on either tier
        self.last_boundary = 0  # and its length (0: no host hit)

    def reset(self) -> None:
        super().reset()
        self.host_leaves = EvictableLeaves(self.tree.leaves.policy)
        self.host_tokens = 0

    # ------------------------------------------------------------------ host leaves
    def is_host_leaf(self, node: TreeNode) -> bool:
        d = node.data[0]
        return (
            node.parent is not None
            and not node.children
            and d.value is None
            and d.host_value is not None
            and d.host_lock_ref == 0
        )

    def update_host_leaf(self, node: TreeNode) -> None:
        if self.is_host_leaf(node):
            self.host_leaves.add(node)
        else:
            self.host_leaves.discard(node)

    def attach_peers(self, components: Sequence[TreeComponent]) -> None:
        """The auxiliary components with a host half (`host_match_validator`): a host hit
        must suit them too."""
        self.aux_hosts = [c for c in components[1:] if hasattr(c, "host_match_validator")]

    # ------------------------------------------------------------------ match
    def match_validator(self) -> Validator | None:
        return _on_device

    def finalize_match(self, walk: MatchWalk, params: MatchPrefixParams) -> dict[str, Any]:
        """The host hit: the path past the device match up to the deepest node every
        component accepts with its data on either tier (full KV always is on one; SWA needs
        a window live on either, Mamba a state on either). Records the boundary for the
        auxiliary components' own finalizers, which run next."""
        path, k = walk.path, walk.num_accepted
        last_device = path[k - 1] if k else self.tree.root
        deepest = k
        if k < len(path):
            validators = [c.host_match_validator() for c in self.aux_hosts]
            for i, node in enumerate(path):
                ok = True
                for validate in validators:
                    ok = validate(node) and ok
                if ok:
                    deepest = i + 1
        host = path[k:deepest] if deepest > k else []
        self.last_best = host[-1] if host else last_device
        self.last_boundary = sum(n.num_tokens for n in path[:deepest]) if host else 0
        if not host:
            return {"last_host_node": last_device, "best_match_node": last_device}
        self.tree.touch_path(host)  # later than the device part: deeper is fresher
        self.host_leaves.refresh(host[-1])
        for c in self.aux_hosts:
            for node in host:
                c.host.touch(node)
        return {
            "host_hit_length": sum(n.num_tokens for n in host),
            "last_host_node": host[-1],
            "best_match_node": host[-1],
        }

    # ------------------------------------------------------------------ split
    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        c, p = child.data[0], parent.data[0]
        if c.value is not None:
            p.value, c.value = c.value[:split_len], c.value[split_len:]
        if c.host_value is not None:
            p.host_value, c.host_value = c.host_value[:split_len], c.host_value[split_len:]
        p.lock_ref, p.host_lock_ref = c.lock_ref, c.host_lock_ref
        if c.metadata:  # a pending write or load covers both fragments
            p.metadata = dict(c.metadata)
        self.host_leaves.refresh(child)  # the split gave it a fresh access time

    # ------------------------------------------------------------------ insert
    def insert_overlap(
        self, ins: InsertContext, node: TreeNode, offset: int, num_tokens: int
    ) -> int:
        """`recover_after_unevict`: an insert over a host-only node revives it with the
        caller's fresh slots (the caller computed those tokens), so nothing is freed."""
        d = node.data[0]
        if d.value is not None:
            return num_tokens
        d.value = ins.value[offset : offset + num_tokens].copy()
        self._credit(node, num_tokens)
        self._after_revive(node)
        return 0

    def _after_revive(self, node: TreeNode) -> None:
        self.host_leaves.discard(node)
        self.tree.update_leaf(node)
        parent = node.parent
        if parent is not None:
            self.tree.update_leaf(parent)  # a child on the device again: no longer a leaf

    # ------------------------------------------------------------------ tier moves
    def demote(self, node: TreeNode, actions: list[FreeSlots]) -> int:
        """Drops the device copy of a backed, unlocked device leaf; returns its units."""
        d = node.data[0]
        assert d.host_value is not None, f"demotion of {node} without a host copy"
        num = self.evict_node(node, actions)
        self.tree.update_leaf(node)
        parent = node.parent
        if parent is not None:
            self.tree.update_leaf(parent)  # may now be a device leaf above host-only children
        self.update_host_leaf(node)
        return num

    def commit_backup(self, node: TreeNode, host_slots: Slots) -> None:
        d = node.data[0]
        assert d.value is not None and d.host_value is None, f"backup of {node}"
        assert host_slots.shape[0] == node.num_tokens
        d.host_value = host_slots
        self.host_tokens += node.num_tokens

    def drop_host_copy(self, node: TreeNode) -> Slots:
        """Takes the host copy of a device-resident node; returns the host slots for the
        caller to free (write-back keeps one copy per node: the device one is enough)."""
        d = node.data[0]
        assert d.value is not None and d.host_value is not None, f"drop host copy of {node}"
        slots = d.host_value
        d.host_value = None
        self.host_tokens -= node.num_tokens
        return slots

    def commit_load_back(self, nodes: list[TreeNode], device_slots: Slots) -> None:
        """Gives the host-only `nodes` (root-first) consecutive slices of `device_slots`."""
        start = 0
        for node in nodes:
            d = node.data[0]
            assert d.value is None and d.host_value is not None, f"load-back of {node}"
            d.value = device_slots[start : start + node.num_tokens]
            start += node.num_tokens
            self._credit(node, node.num_tokens)
            self._after_revive(node)
        assert start == device_slots.shape[0]

    def clear_marks(self, anchor: TreeNode, kind: str, ticket: int) -> list[TreeNode]:
        """Clears the `kind` ("write" / "load") marks of `ticket` on the chain ending at
        `anchor`; returns the chain, deepest first."""
        chain = []
        for n in self.tree.path_to_root(anchor):
            meta = n.data[0].metadata
            if meta is None or meta.get(kind) != ticket:
                break
            n.data[0].metadata = None
            chain.append(n)
        return chain

    def evict_host_node(self, node: TreeNode) -> Slots:
        """Takes the host copy of a host leaf; returns the host slots for the caller to free
        (the caller then removes the node from the tree)."""
        assert self.is_host_leaf(node), f"{node} is not a host leaf"
        d = node.data[0]
        slots = d.host_value
        assert slots is not None
        d.host_value = None
        self.host_tokens -= node.num_tokens
        self.host_leaves.discard(node)
        return slots

    def host_segment(self, node: TreeNode) -> list[TreeNode]:
        """The host-only nodes ending at `node`, root-first (empty if `node` is on device)."""
        segment = []
        while node.parent is not None and node.data[0].value is None:
            segment.append(node)
            node = node.parent
        segment.reverse()
        return segment

    def inc_host_lock_ref(self, node: TreeNode) -> None:
        """Pins the host-only segment ending at `node` against host eviction."""
        for n in self.host_segment(node):
            n.data[0].host_lock_ref += 1
            self.host_leaves.discard(n)

    def dec_host_lock_ref(self, node: TreeNode) -> None:
        segment = self.host_segment(node)
        for n in segment:  # check first: a bad release changes nothing
            if n.data[0].host_lock_ref <= 0:
                raise ValueError(
                    f"dec_host_lock_ref: {n} has host_lock_ref={n.data[0].host_lock_ref}"
                )
        for n in segment:
            n.data[0].host_lock_ref -= 1
            self.update_host_leaf(n)

    # ------------------------------------------------------------------ checks
    def check_invariants(self, errors: list[str]) -> None:
        super(FullComponent, self).check_invariants(errors)  # the device ledger
        host_tokens, host_leaves = 0, set()
        for node in self.tree.nodes():
            d = node.data[0]
            if d.value is None and d.host_value is None:
                errors.append(f"full: {node} has full KV on no tier")
            for name, slots in (("device", d.value), ("host", d.host_value)):
                if slots is not None and slots.shape[0] != node.num_tokens:
                    errors.append(
                        f"full: {node} holds {slots.shape[0]} {name} slots "
                        f"for {node.num_tokens} units"
                    )
            if d.host_value is not None:
                host_tokens += d.host_value.shape[0]
            if d.host_lock_ref < 0:
                errors.append(f"full: {node} host_lock_ref={d.host_lock_ref} < 0")
            parent = node.parent
            if parent is not None and parent is not self.tree.root:
                if d.value is not None and parent.data[0].value is None:
                    errors.append(f"full: {node} is on the device but its parent is not")
                if parent.data[0].lock_ref < d.lock_ref:
                    errors.append(f"full: {node} lock_ref={d.lock_ref} exceeds its parent's")
            if d.value is None and d.lock_ref:
                errors.append(f"full: host-only {node} has lock_ref={d.lock_ref}")
            if self.is_host_leaf(node):
                host_leaves.add(node)
        if host_tokens != self.host_tokens:
            errors.append(f"full: host ledger {self.host_tokens} != tree host slots {host_tokens}")
        if host_leaves != self.host_leaves.members:
            errors.append(
                "full: host leaf set differs: "
                f"missing {sorted(n.id for n in host_leaves - self.host_leaves.members)}, "
                f"extra {sorted(n.id for n in self.host_leaves.members - host_leaves)}"
            )

    def host_values(self) -> Slots:
        values = [v for n in self.tree.nodes() if (v := n.data[0].host_value) is not None]
        return np.concatenate(values) if values else np.empty(0, np.int64)
