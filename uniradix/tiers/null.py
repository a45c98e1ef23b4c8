"""NoHostTier: the host tier of a cache that has none (a null object).

Every hook the cache and the scheduler call is a no-op, so a cache without a host tier does
no extra work per operation beyond one method call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from uniradix.tiers.storage_tier import StorageTier
    from uniradix.tree.node import TreeNode
    from uniradix.types import FreeSlots, MatchResult, Req


class NoHostTier:
    enabled = False
    storage: StorageTier | None = None  # an L3 store under the host tier, when configured

    def after_insert(self, node: TreeNode) -> None:
        return

    def evict_leaf(self, node: TreeNode, actions: list[FreeSlots], tracker: list[int]) -> int:
        """Full units demoted instead of deleted (0: the caller deletes the leaf); auxiliary
        units dropped on the way are added to `tracker`."""
        return 0

    def before_internal_eviction(self, node: TreeNode) -> None:
        """Called before a device tombstone of auxiliary data on the internal `node`."""
        return

    def load_back(
        self, match: MatchResult, mem_quota: int | None = None, req: Req | None = None
    ) -> MatchResult:
        return match

    def writing_check(self) -> None:
        return

    def loading_check(self) -> None:
        return

    def wait_loads(self) -> None:
        return

    def drain(self) -> None:
        """Waits for and commits every transfer in flight."""
        return

    def check_invariants(self, errors: list[str]) -> None:
        return

    def reset(self) -> None:
        return

    def close(self) -> None:
        return
