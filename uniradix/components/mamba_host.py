"""HostMambaComponent: Mamba state checkpoints with a host half.

A node's state may be on the device, on the host or both (`uniradix.components.aux_host`).
The host copy (one host state slot) is written with the node's full KV and survives a
device Mamba eviction or the node's demotion; a match may then end at a node whose state is
on the host only (`MatchResult.mamba_host_hit_length` is 1 there), and a load-back copies
that state into a fresh device slot for the node and into the request's own slot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from uniradix.components.aux_host import AuxHostComponent, LoadRoom
from uniradix.components.mamba import MambaComponent
from uniradix.tree.acceptance import Validator
from uniradix.tree.core import MatchWalk
from uniradix.tree.node import TreeNode
from uniradix.types import (
    FreeKind,
    FreeSlots,
    InsertContext,
    MatchPrefixParams,
    Req,
    Slots,
)


class HostMambaComponent(AuxHostComponent, MambaComponent):
    host_name = "mamba"

    # ------------------------------------------------------------------ match
    def host_match_validator(self) -> Validator:
        i = self.index
        return lambda node: node.data[i].value is not None or node.data[i].host_value is not None

    def finalize_match(self, walk: MatchWalk, params: MatchPrefixParams) -> dict[str, Any]:
        """The branching point counts from the match's end on either tier; a host-only state
        at that end is the Mamba host hit."""
        out = super().finalize_match(walk, params)
        best: TreeNode | None = getattr(self._full, "last_best", None)
        boundary: int = getattr(self._full, "last_boundary", 0)
        branch = out["mamba_branching_seqlen"]
        if branch is not None and branch <= boundary:
            out["mamba_branching_seqlen"] = None
        if best is not None and self.host.is_host_only(best):
            out["mamba_host_hit_length"] = 1
        return out

    def load_plan(self, anchor: TreeNode) -> list[TreeNode] | None:
        """`[anchor]` when its state is on the host only, nothing when on the device, None
        when on no tier any more (host eviction since the match)."""
        d = anchor.data[self.index]
        if d.value is None and d.host_value is None:
            return None
        return [anchor] if d.value is None else []

    def load_room(self, plan: list[TreeNode], new_full: Mapping[TreeNode, Slots]) -> LoadRoom:
        return LoadRoom(states=len(plan))

    def commit_load_plan(self, plan: list[TreeNode], device: Slots) -> None:
        for i, n in enumerate(plan):
            self.commit_load_back(n, device[i : i + 1])

    def arrival_problem(self, num: int, range_tokens: int) -> str | None:
        return None if num == 1 else f"must be one state slot, got {num}"

    def request_slot(self, req: Req | None) -> int | None:
        return None if req is None else req.mamba_pool_idx

    def request_source(self, node: TreeNode) -> int | None:
        return self.slot(node)

    def commit_load_back(self, node: TreeNode, slot: Slots) -> None:
        d = node.data[self.index]
        assert d.value is None and slot.shape == (1,)
        d.value = slot
        self._credit(node, 1)
        self.lru.insert_mru(node)
        if self._credits is not None:
            self._credits.touch(node)  # back on the device: credited as if stored now
        self.host.update(node)

    def unload(self, node: TreeNode, actions: list[FreeSlots]) -> None:
        """Undoes `commit_load_back` (a copy that failed), locked or not."""
        d = node.data[self.index]
        assert d.value is not None
        actions.append(FreeSlots(FreeKind.MAMBA, d.value))
        self._debit(node, 1)
        d.value = None
        self.lru.remove(node)
        if self._credits is not None:
            self._credits.forget(node)
        self.host.update(node)

    # ------------------------------------------------------------------ hooks
    def commit_insert(self, ins: InsertContext, node: TreeNode) -> None:
        super().commit_insert(ins, node)
        if node is not self.tree.root:
            self.host.update(node)

    def evict_node(self, node: TreeNode, actions: list[FreeSlots]) -> int:
        num = super().evict_node(node, actions)
        self.host.update(node)
        return num

    def check_invariants(self, errors: list[str]) -> None:
        super().check_invariants(errors)
        self.host.check_invariants(list(self.tree.nodes()), 1, errors)
