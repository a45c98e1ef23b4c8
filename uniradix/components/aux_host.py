"""AuxHostHalf: the host half of an auxiliary component (SWA window KV, Mamba state).

An auxiliary component's data on a node may sit on the device (`value`), on the host
(`host_value`) or both, independently of the full KV beside it (which the host tier keeps
on the host whenever an auxiliary host copy exists). Its host LRU list holds the nodes
whose data is on the host *only* and not pinned (`host_lock_ref == 0`): those are what host
eviction of this component may drop, oldest first (a host tombstone: the node stays)::

    device  value=slots  host_value=None    not in the host LRU
    backed  value=slots  host_value=slots   not in the host LRU (the device copy serves)
    host    value=None   host_value=slots   in the host LRU unless pinned

The list is a plain insertion-ordered dict, not the intrusive links of the device LRU: a
node's links there say "in the device list", and a second list must not alias them.
Like every component part it frees nothing: it returns host slots for the tier to free.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from uniradix.components.base import TreeComponent
from uniradix.tree.core import TreeCore
from uniradix.tree.node import TreeNode
from uniradix.types import CacheSettings, FreeSlots, Req, Slots


class LoadRoom(NamedTuple):
    """The device room a load-back plan needs of one auxiliary component: SWA peers for
    the full slots `swa_of` (the window's), and/or `states` Mamba state slots. The tier
    allocates it (components never allocate) and hands back the device slots to commit."""

    swa_of: Slots | None = None
    states: int = 0


class AuxHostHalf:
    def __init__(self, index: int, name: str) -> None:
        self.index = index
        self.name = name
        self.lru: dict[TreeNode, None] = {}  # oldest first
        self.units = 0  # host units held by the tree (slots for SWA, states for Mamba)

    def reset(self) -> None:
        self.lru = {}
        self.units = 0

    def is_host_only(self, node: TreeNode) -> bool:
        d = node.data[self.index]
        return d.value is None and d.host_value is not None

    def update(self, node: TreeNode) -> None:
        """Puts `node` in the host LRU (as the most recent) or takes it out, as its data says."""
        d = node.data[self.index]
        self.lru.pop(node, None)
        if d.value is None and d.host_value is not None and d.host_lock_ref == 0:
            self.lru[node] = None

    def touch(self, node: TreeNode) -> None:
        """A match used `node`'s host copy: it becomes the most recent."""
        if node in self.lru:
            del self.lru[node]
            self.lru[node] = None

    def oldest(self) -> Iterator[TreeNode]:
        """Host-only, unpinned nodes, oldest first; the caller drops each before the next."""
        while self.lru:
            yield next(iter(self.lru))

    # ------------------------------------------------------------------ data
    def commit_backup(self, node: TreeNode, host_slots: Slots) -> None:
        d = node.data[self.index]
        assert d.value is not None and d.host_value is None, f"{self.name} backup of {node}"
        assert host_slots.shape[0] == d.value.shape[0]
        d.host_value = host_slots
        self.units += int(host_slots.shape[0])

    def adopt(self, node: TreeNode, host_slots: Slots) -> None:
        """Host slots that arrived from outside the device (an L3 prefetch) become the host
        copy of the host-only `node`."""
        d = node.data[self.index]
        assert d.value is None and d.host_value is None, f"{self.name} adopt by {node}"
        d.host_value = host_slots
        self.units += int(host_slots.shape[0])
        self.update(node)

    def drop(self, node: TreeNode) -> Slots:
        """Takes `node`'s host copy (pinned or not); returns the host slots to free."""
        d = node.data[self.index]
        slots = d.host_value
        assert slots is not None, f"{self.name}: {node} has no host copy"
        d.host_value = None
        self.units -= int(slots.shape[0])
        self.lru.pop(node, None)
        return slots

    def pin(self, node: TreeNode) -> None:
        node.data[self.index].host_lock_ref += 1
        self.lru.pop(node, None)

    def unpin(self, node: TreeNode) -> None:
        d = node.data[self.index]
        if d.host_lock_ref <= 0:
            raise ValueError(f"{self.name}: unpin of {node} with host_lock_ref={d.host_lock_ref}")
        d.host_lock_ref -= 1
        self.update(node)

    # ------------------------------------------------------------------ checks
    def check_invariants(
        self, nodes: list[TreeNode], unit_len: int | None, errors: list[str]
    ) -> None:
        """Ledger, LRU membership, host lock counts and "host copy => full host copy";
        `unit_len` is the host value length per node (None: the node's token count)."""
        units, listed = 0, set()
        for node in nodes:
            d = node.data[self.index]
            if d.host_lock_ref < 0:
                errors.append(f"{self.name}: {node} host_lock_ref={d.host_lock_ref} < 0")
            if d.host_value is None:
                continue
            units += int(d.host_value.shape[0])
            want = node.num_tokens if unit_len is None else unit_len
            if d.host_value.shape[0] != want:
                errors.append(f"{self.name}: {node} holds {d.host_value.shape[0]} host slots")
            if node.data[0].host_value is None:
                errors.append(f"{self.name}: {node} has a host copy but no full host copy")
            if d.value is None and d.host_lock_ref == 0:
                listed.add(node)
        if units != self.units:
            errors.append(f"{self.name}: host ledger {self.units} != tree host units {units}")
        if listed != set(self.lru):
            errors.append(
                f"{self.name}: host LRU lists {sorted(n.id for n in self.lru)}, host-only "
                f"unpinned nodes are {sorted(n.id for n in listed)}"
            )


class AuxHostComponent(TreeComponent):
    """What the SWA and Mamba host components share, mixed in before their device component
    (`class HostSWAComponent(AuxHostComponent, SWAComponent)`): the host half, and the full
    component that measures the host boundary."""

    host_name: str  # the host pool's name: "swa" or "mamba"

    def __init__(self, index: int, tree: TreeCore, settings: CacheSettings) -> None:
        super().__init__(index, tree, settings)
        self.host = AuxHostHalf(index, self.host_name)
        self._full: Any = None  # the HostFullComponent

    def attach_peers(self, components: Sequence[TreeComponent]) -> None:
        super().attach_peers(components)
        self._full = components[0]

    def reset(self) -> None:
        super().reset()
        self.host.reset()

    # ------------------------------------------------------------------ load-back hooks
    @abstractmethod
    def load_plan(self, anchor: TreeNode) -> list[TreeNode] | None:
        """The nodes, root-first, whose host-only data a load-back anchored at `anchor` must
        bring back; None when no tier holds what `anchor` needs any more."""

    @abstractmethod
    def load_room(self, plan: list[TreeNode], new_full: Mapping[TreeNode, Slots]) -> LoadRoom:
        """What loading `plan` needs on the device; `new_full` maps the nodes whose full KV
        the same load-back brings to their new full slots."""

    @abstractmethod
    def commit_load_plan(self, plan: list[TreeNode], device: Slots) -> None:
        """Gives the nodes of `plan` their slices of the reserved `device` slots."""

    @abstractmethod
    def unload(self, node: TreeNode, actions: list[FreeSlots]) -> None:
        """Undoes `commit_load_plan` on `node` (a copy that failed); the host copy stays."""

    @abstractmethod
    def arrival_problem(self, num: int, range_tokens: int) -> str | None:
        """What is wrong with `num` host units arriving (an L3 prefetch) for the end of a
        range of `range_tokens` tokens; None when they fit."""

    def request_slot(self, req: Req | None) -> int | None:
        """`req`'s own device slot that a load-back of this component fills too (the state
        the request resumes from); None when the component has none."""
        return None

    def request_source(self, node: TreeNode) -> int | None:
        """The device slot whose data a request resuming at `node` starts from (None: none)."""
        return None
