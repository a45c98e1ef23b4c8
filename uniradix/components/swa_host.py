"""HostSWAComponent: SWA window KV with a host half (the L2 tier's view of a node's window).

A node's SWA KV may be on the device, on the host or both (`uniradix.components.aux_host`).
The host copy is written with the node's full KV (same batch) and survives a device SWA
tombstone or the node's demotion; a match may then end where the window before the boundary
is live on *some* tier (`host_match_validator`), and a load-back brings back only the window
nodes whose SWA is on the host only (`load_plan`), into fresh SWA slots mapped to their
full slots (old ones, or the ones the same load-back gives the full KV).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from uniradix.components.aux_host import AuxHostComponent, LoadRoom
from uniradix.components.swa import SWAComponent
from uniradix.tree.acceptance import Validator
from uniradix.tree.core import MatchWalk
from uniradix.tree.node import TreeNode
from uniradix.types import (
    FreeKind,
    FreeSlots,
    InsertContext,
    MatchPrefixParams,
    Slots,
)


class HostSWAComponent(AuxHostComponent, SWAComponent):
    host_name = "swa"

    # ------------------------------------------------------------------ match
    def host_match_validator(self) -> Validator:
        """The device validator with "live" meaning live on either tier."""
        i, window = self.index, self.window
        live = float("inf")

        def validate(node: TreeNode) -> bool:
            nonlocal live
            d = node.data[i]
            if d.value is None and d.host_value is None:
                live = 0
                return False
            live += node.num_tokens
            return live >= window

        return validate

    def finalize_match(self, walk: MatchWalk, params: MatchPrefixParams) -> dict[str, Any]:
        out = super().finalize_match(walk, params)
        best: TreeNode | None = getattr(self._full, "last_best", None)
        if best is not None and self._full is not None and self._full.last_boundary:
            plan = self.load_plan(best) or []
            out["swa_host_hit_length"] = sum(n.num_tokens for n in plan)
        return out

    def load_plan(self, anchor: TreeNode) -> list[TreeNode] | None:
        """The nodes of the window ending at `anchor` whose SWA is on the host only,
        root-first (what a load-back anchored there must bring back); None when no tier
        holds that window any more (host eviction since the match)."""
        plan, covered, i = [], 0, self.index
        for n in self.tree.path_to_root(anchor):
            if covered >= self.window:
                break
            d = n.data[i]
            if d.value is None:
                if d.host_value is None:
                    return None  # a gap inside the window
                plan.append(n)
            covered += n.num_tokens
        plan.reverse()
        return plan

    def load_room(self, plan: list[TreeNode], new_full: Mapping[TreeNode, Slots]) -> LoadRoom:
        """SWA peers for the plan's full slots (old ones, or those the load-back brings)."""
        under: list[Slots] = []
        for n in plan:
            full = new_full.get(n, n.data[0].value)
            assert full is not None, f"SWA load-back of {n} without full KV"
            under.append(full)
        return LoadRoom(swa_of=np.concatenate(under) if len(under) > 1 else under[0])

    def commit_load_plan(self, plan: list[TreeNode], device: Slots) -> None:
        start = 0
        for n in plan:
            self.commit_load_back(n, device[start : start + n.num_tokens])
            start += n.num_tokens

    def arrival_problem(self, num: int, range_tokens: int) -> str | None:
        ps = self.settings.page_size
        if num % ps or num > range_tokens or num == 0:
            return (
                f"holds {num} slots: not whole pages of {ps} within the range's "
                f"{range_tokens} tokens"
            )
        return None

    def commit_load_back(self, node: TreeNode, swa_slots: Slots) -> None:
        assert node.data[self.index].value is None and swa_slots.shape[0] == node.num_tokens
        self._publish(node, swa_slots, self.tree.prefix_len(node))

    def unload(self, node: TreeNode, actions: list[FreeSlots]) -> None:
        """Undoes `commit_load_back` (a copy that failed), locked or not: the device SWA
        slots go (through the full slots), the host copy stays."""
        d = node.data[self.index]
        assert d.value is not None
        full = node.data[0].value
        assert full is not None
        actions.append(FreeSlots(FreeKind.SWA, full, node_value=True))
        self._debit(node, int(d.value.shape[0]))
        d.value = None
        self.lru.remove(node)
        if self._reuse is not None:
            self._reuse.forget(node)
        self.host.update(node)

    # ------------------------------------------------------------------ hooks
    def _publish(self, node: TreeNode, swa: Slots, depth: int) -> None:
        super()._publish(node, swa, depth)
        self.host.update(node)

    def evict_node(self, node: TreeNode, actions: list[FreeSlots]) -> int:
        num = super().evict_node(node, actions)
        self.host.update(node)
        return num

    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        super().redistribute_on_split(parent, child, split_len)
        c, p = child.data[self.index], parent.data[self.index]
        if c.host_value is not None:
            p.host_value, c.host_value = c.host_value[:split_len], c.host_value[split_len:]
        p.host_lock_ref = c.host_lock_ref
        self.host.update(parent)

    def insert_overlap(
        self, ins: InsertContext, node: TreeNode, offset: int, num_tokens: int
    ) -> int:
        """As the device half, except over a node the full component has just revived with
        the caller's slots (a demoted node): those slots are the node's now, so the SWA peers
        of its live part are published as they are (recovering would free them)."""
        d, full = node.data[self.index], node.data[0].value
        if d.value is not None or full is None:
            return num_tokens
        if not np.array_equal(full, ins.value[offset : offset + num_tokens]):
            return super().insert_overlap(ins, node, offset, num_tokens)
        end = offset + num_tokens
        start = self._live_start(ins, node, offset, end)
        if start >= end:
            return num_tokens
        self._publish(node, self.allocator.peers_of(ins.value[start:end]), end)
        return 0

    def check_invariants(self, errors: list[str]) -> None:
        super().check_invariants(errors)
        self.host.check_invariants(list(self.tree.nodes()), None, errors)
