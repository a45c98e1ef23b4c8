"""What the host tier's parts and the controller's helpers see of the controller and of the
host tier: two small protocols, so those modules take them as arguments instead of importing
the classes that import them (docs/design.md, "Layers": no circle of imports).

`CacheView` is the controller (`UnifiedRadixCache`) as the host tier, the L3 wiring and the
Mamba request steps use it; `HostTierView` is the host tier (`HostTier`) as its load-back,
its backups, its checks and the L3 wiring use it. Both are read-only views: nothing here is assigned
through them (the counters they return are the tier's own, updated in place).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from uniradix.components.aux_host import AuxHostComponent
    from uniradix.components.base import TreeComponent
    from uniradix.components.full_host import HostFullComponent
    from uniradix.event_sink import CacheEventSink
    from uniradix.key import RadixKey
    from uniradix.memory.host_pools import HostPools
    from uniradix.memory.pools import CachePools
    from uniradix.tiers.host_aux import HostAux
    from uniradix.tiers.stats import HostTierStats
    from uniradix.tiers.tickets import Tickets
    from uniradix.tiers.transfer import AuxCopy, TransferEngine
    from uniradix.tiers.write_policy import WritePolicy
    from uniradix.tree.core import TreeCore
    from uniradix.tree.node import TreeNode
    from uniradix.types import (
        CacheSettings,
        ComponentKey,
        DecLockRefParams,
        EvictParams,
        EvictResult,
        FreeSlots,
        IncLockRefResult,
        MatchPrefixParams,
        MatchResult,
        Slots,
    )


class CacheView(Protocol):
    @property
    def tree(self) -> TreeCore: ...
    @property
    def components(self) -> list[TreeComponent]: ...
    @property
    def pools(self) -> CachePools: ...
    @property
    def page_size(self) -> int: ...
    @property
    def device(self) -> torch.device: ...
    @property
    def event_sink(self) -> CacheEventSink | None: ...
    @property
    def settings(self) -> CacheSettings: ...
    def component(self, component_type: ComponentKey) -> TreeComponent: ...
    def match_prefix(self, params: MatchPrefixParams) -> MatchResult: ...
    def inc_lock_ref(self, node: TreeNode) -> IncLockRefResult: ...
    def dec_lock_ref(
        self, node: TreeNode, params: DecLockRefParams | IncLockRefResult | None = None
    ) -> None: ...
    def evict(self, params: EvictParams) -> EvictResult: ...
    def to_device(self, slots: Slots) -> torch.Tensor: ...
    def path_indices(self, node: TreeNode) -> torch.Tensor: ...
    def apply(self, actions: list[FreeSlots]) -> None: ...


class StorageReservations(Protocol):
    """The L3 wiring as the host pool's identity counts it."""

    @property
    def reserved_tokens(self) -> int: ...


class HostTierView(Protocol):
    @property
    def cache(self) -> CacheView: ...
    @property
    def full(self) -> HostFullComponent: ...
    @property
    def host_pools(self) -> HostPools: ...
    @property
    def engine(self) -> TransferEngine: ...
    @property
    def policy(self) -> WritePolicy: ...
    @property
    def load_back_threshold(self) -> int: ...
    @property
    def stats(self) -> HostTierStats: ...
    @property
    def writes(self) -> dict[int, tuple[TreeNode, IncLockRefResult]]: ...
    @property
    def loads(self) -> dict[int, tuple[TreeNode, IncLockRefResult]]: ...
    @property
    def aux_locks(self) -> dict[int, list[tuple[TreeNode, IncLockRefResult]]]: ...
    @property
    def aux(self) -> list[AuxHostComponent]: ...  # the SWA / Mamba host halves, in cache order
    @property
    def tickets(self) -> Tickets: ...
    @property
    def aux_by_name(self) -> dict[str, AuxHostComponent]: ...
    @property
    def aux_indices(self) -> tuple[int, ...]: ...  # the host halves' component indices
    @property
    def threshold(self) -> int | None: ...  # hits that trigger a backup (None: none do)
    @property
    def revived_copies(self) -> dict[int, list[AuxCopy]]: ...  # by ticket, until it lands
    def write_now(self, node: TreeNode) -> None: ...
    @property
    def storage(self) -> StorageReservations | None: ...
    def insert_host(
        self, key: RadixKey, host_slots: Slots, start: int, aux: HostAux | None = None
    ) -> int: ...
    def alloc_host(self, num_tokens: int) -> Slots | None: ...
    def drop_device_copies_host(self, num_tokens: int) -> int: ...
    def inc_host_lock_ref(self, node: TreeNode) -> None: ...
    def dec_host_lock_ref(self, node: TreeNode) -> None: ...
