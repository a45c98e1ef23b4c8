"""`ControllerView`: the controller as its helper modules (eviction, invariant checks, request
caching) use it. They take it as an argument typed by this protocol instead of importing
`UnifiedRadixCache`, which imports them (docs/design.md, "Layers": no circle of imports)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from uniradix.tiers.views import CacheView

if TYPE_CHECKING:
    import torch

    from uniradix.cache.mamba_requests import MambaRequests, NoMambaRequests
    from uniradix.cache.sessions import NullSessions, SessionCache
    from uniradix.components.base import TreeComponent
    from uniradix.key import RadixKey
    from uniradix.tiers.null import NoHostTier
    from uniradix.tree.node import TreeNode
    from uniradix.types import FreeSlots, InsertParams, InsertResult


class ControllerView(CacheView, Protocol):
    # The components that act on a request's out-of-window slots (request caching loops
    # over them per request per step).
    @property
    def _window_freers(self) -> list[TreeComponent]: ...
    @property
    def host_tier(self) -> NoHostTier: ...
    @property
    def sessions(self) -> SessionCache | NullSessions: ...
    @property
    def mamba_requests(self) -> MambaRequests | NoMambaRequests: ...
    def apply(self, actions: list[FreeSlots]) -> None: ...
    def insert(self, params: InsertParams) -> InsertResult: ...
    def make_key(
        self, token_ids: Sequence[int] | torch.Tensor, extra_key: str | None = None
    ) -> RadixKey: ...
    def path_indices(self, node: TreeNode) -> torch.Tensor: ...
