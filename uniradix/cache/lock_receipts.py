"""LockReceipts: the outstanding receipts of `inc_lock_ref`, so each is given back once.

A receipt records what one lock did per component (the boundary markers an unlock needs,
the components released early); `take` checks that a release names an outstanding receipt
anchored on the node it unlocks, so a double or misdirected release raises instead of
driving a lock count below zero.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from uniradix.tree.node import TreeNode
from uniradix.types import ComponentKey, DecLockRefParams, IncLockRefResult, Req

if TYPE_CHECKING:
    from uniradix.components.base import TreeComponent


class LockReceipts:
    def __init__(self) -> None:
        # The controller's `inc_lock_ref` / `dec_lock_ref` add and remove receipts here
        # directly: a method call per lock is ~5% of either op (benchmarks/against_ref.py).
        self.outstanding: dict[int, IncLockRefResult] = {}
        self.ids = itertools.count(1)

    def get(self, receipt: IncLockRefResult | None) -> IncLockRefResult | None:
        """The current version of `receipt` if it is outstanding."""
        return None if receipt is None else self.outstanding.get(receipt.receipt_id)

    def take(
        self, node: TreeNode, params: DecLockRefParams | IncLockRefResult | None
    ) -> IncLockRefResult:
        """Removes and returns the receipt `params` names (any one on `node` when None);
        ValueError when it is not outstanding or anchored elsewhere."""
        if params is None:
            receipt = next((r for r in self.outstanding.values() if r.node is node), None)
            if receipt is None:
                raise ValueError(f"dec_lock_ref: no outstanding lock on {node!r}")
        else:
            receipt = self.outstanding.get(params.receipt_id)
            if receipt is None:
                raise ValueError(
                    f"dec_lock_ref: receipt {params.receipt_id} is not outstanding "
                    "(released twice?)"
                )
            if receipt.node is not node or params.node is not node:
                raise ValueError(
                    f"dec_lock_ref: receipt {params.receipt_id} is anchored on "
                    f"{receipt.node}, not {node}"
                )
        del self.outstanding[receipt.receipt_id]
        return receipt

    def release_window(self, req: Req, components: Sequence[TreeComponent]) -> None:
        """Releases early the parts of `req.lock` that `components` no longer need (their
        `release_window_lock` decides), recording them in the receipt so that the final
        unlock skips them; `req.lock` becomes the updated receipt."""
        stored = self.get(req.lock)
        if stored is None:
            raise ValueError(f"release_window_lock: request holds no outstanding lock: {req.lock}")
        skipped = stored.skipped_lock_components
        released: tuple[ComponentKey, ...] = ()
        for c in components:  # a loop, not a generator: runs per request per step
            kind = c.component_type
            if kind not in skipped and c.release_window_lock(
                req, stored.node, stored.component_lock_uuids[kind]
            ):
                released += (kind,)
        if released:
            updated = dataclasses.replace(stored, skipped_lock_components=skipped + released)
            self.outstanding[stored.receipt_id] = req.lock = updated

    def clear(self) -> None:
        self.outstanding.clear()
