"""TreeComponent: the hook protocol through which one kind of cached state lives in the tree.

A component owns `node.data[self.index]` on every node and its own ledger of evictable and
protected units. It never frees pool memory: eviction and insert hooks append `FreeSlots`
actions that the cache applies, in order, right after the call.

Hook phases (defaults suit a component whose state covers every token, like full attention):

=========  ==============================================================================
match      `match_requires_value` (a node matches only with this component's data), or
           `match_window` (only under that many units with its data), or `match_validator`
           (stateful, sees every path node in order); `finalize_match`
split      `redistribute_on_split` (required)
setup      `attach_pools` (read-only access to the pools, e.g. the full->SWA slot mapping)
insert     `check_insert` (reject a bad value before anything changes), `insert_overlap` (may
           adopt part of the incoming value), `commit_insert`
evict      `eviction_priority`, `eviction_candidates`, `evict_node` (required)
lock       `lock` / `unlock` (required), returning and taking a boundary marker;
           `release_window_lock` (early release while other components stay locked)
requests   `free_out_of_window` (slots of a running request no longer needed)
sessions   `session_coverage` (what a session's next turn needs kept, from its last leaf)
checks     `check_invariants`
=========  ==============================================================================
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from uniradix.tree.acceptance import Validator
from uniradix.tree.core import MatchWalk, TreeCore
from uniradix.tree.node import ComponentData, TreeNode
from uniradix.types import (
    CacheSettings,
    ComponentKey,
    ComponentType,
    FreeSlots,
    InsertContext,
    MatchPrefixParams,
    Req,
    Slots,
)

if TYPE_CHECKING:
    from uniradix.memory.pools import CachePools


EVICTED_MARK = "evicted"
"""`ComponentData.metadata` key set when a component's value on the node was evicted (not
freed by a running request), so a replay can tell an evicted state from one never kept."""


def mark_evicted(data: ComponentData) -> None:
    if data.metadata is None:
        data.metadata = {}
    data.metadata[EVICTED_MARK] = True


class TreeComponent(ABC):
    # A built-in type, or (a component from outside the package) the name it registers under.
    component_type: ClassVar[ComponentKey]

    def __init__(self, index: int, tree: TreeCore, settings: CacheSettings) -> None:
        self.index = index
        self.tree = tree
        self.settings = settings
        self.evictable_tokens = 0
        self.protected_tokens = 0

    @property
    def name(self) -> str:
        ct = self.component_type
        return ct.name.lower() if isinstance(ct, ComponentType) else ct

    def reset(self) -> None:
        self.evictable_tokens = 0
        self.protected_tokens = 0

    def attach_pools(self, pools: CachePools) -> None:
        """Called once by the cache; a component may keep the pools to *read* them (never to
        allocate or free) and raises TypeError if they lack what it needs."""
        return

    def attach_peers(self, components: Sequence[TreeComponent]) -> None:
        """Called once by the cache with all its components, in order (e.g. a Mamba state's
        eviction order asks whether the SWA window before it is live)."""
        return

    # ------------------------------------------------------------------ accounting
    def value_len(self, node: TreeNode) -> int:
        """Units this component's value on `node` accounts for in its ledger."""
        value = node.data[self.index].value
        return 0 if value is None else int(value.shape[0])

    def has_value(self, node: TreeNode) -> bool:
        return node.data[self.index].value is not None

    def _credit(self, node: TreeNode, num: int) -> None:
        """A value of `num` units appeared on `node`: count it as protected if locked."""
        if node.data[self.index].lock_ref > 0:
            self.protected_tokens += num
        else:
            self.evictable_tokens += num

    def _protect(self, num: int) -> None:
        """`num` units were locked (negative: unlocked): move them between the ledgers."""
        self.evictable_tokens -= num
        self.protected_tokens += num

    def _debit(self, node: TreeNode, num: int) -> None:
        if node.data[self.index].lock_ref > 0:
            self.protected_tokens -= num
        else:
            self.evictable_tokens -= num

    # ------------------------------------------------------------------ match
    # True: a match may end only on a node holding this component's data (Mamba: a state to
    # resume from). Checked inline by the tree walk, which costs no call per node.
    match_requires_value = False
    # A window of units: a match may end only where the last `match_window` units of the path
    # hold this component's data, or no node above lacks it (SWA). Checked inline by the walk.
    match_window: int | None = None

    def match_validator(self) -> Validator | None:
        """A fresh predicate for one match walk, or None to accept every node."""
        return None

    def finalize_match(self, walk: MatchWalk, params: MatchPrefixParams) -> dict[str, Any]:
        """Extra `MatchResult` fields this component reports for the walk."""
        return {}

    # ------------------------------------------------------------------ split
    @abstractmethod
    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        """`parent` took the first `split_len` units of `child`: move data accordingly."""

    # ------------------------------------------------------------------ insert
    def check_insert(self, ins: InsertContext) -> None:
        """Raises ValueError if `ins.value` cannot be inserted with `ins.params`; runs before
        the insert changes anything."""
        return

    def insert_overlap(
        self, ins: InsertContext, node: TreeNode, offset: int, num_tokens: int
    ) -> int:
        """The insert reuses `node` (key units `[offset, offset + num_tokens)`). Returns the
        node-relative position from which this component adopted the incoming `ins.value`, so
        those slots are not freed as duplicates (`num_tokens`: adopted nothing).

        A hook may split `node` (the tree keeps `node` as the deeper part): components after
        it then see `node` covering only the last units of the span."""
        return num_tokens

    def commit_insert(self, ins: InsertContext, node: TreeNode) -> None:
        """Publishes this component's data on `node`, the node ending the inserted key (a new
        leaf when `ins.leaf_value` is set)."""
        return

    # ------------------------------------------------------------------ evict
    @abstractmethod
    def eviction_priority(self, is_leaf: bool) -> float:
        """Evicting this component on a node also evicts components of lower or equal
        priority there (cascade)."""

    @abstractmethod
    def eviction_candidates(self) -> Iterator[TreeNode]:
        """Nodes to evict this component from, in eviction order; the caller evicts each one
        before asking for the next."""

    @abstractmethod
    def evict_node(self, node: TreeNode, actions: list[FreeSlots]) -> int:
        """Drops this component's (unlocked) value on `node`; returns the units freed."""

    # ------------------------------------------------------------------ lock
    @abstractmethod
    def lock(self, node: TreeNode) -> tuple[int, int | None]:
        """Protects what a request anchored at `node` needs; returns (units moved from
        evictable to protected, boundary marker for `unlock`)."""

    @abstractmethod
    def unlock(self, node: TreeNode, marker: int | None) -> None:
        """Undoes exactly one `lock(node)` that returned `marker`."""

    def release_window_lock(self, req: Req, node: TreeNode, marker: int | None) -> bool:
        """Undoes this component's part of `lock(node)` early, if the running `req` no
        longer needs it; returns whether it did (the final unlock must then skip it)."""
        return False

    # ------------------------------------------------------------------ requests
    def free_out_of_window(self, req: Req, row: Slots, actions: list[FreeSlots]) -> int:
        """Frees (via `actions`) this component's slots of the running `req` that it will
        never read again; `row` is the request's slots for positions `[0, kv_committed_len)`.
        Returns the number of slots freed. Like `release_window_lock`, it may read the page
        floor of `req.kv_committed_len` but not the position within the page: a scheduler
        skips both calls on decode steps that do not fill a page (see `uniradix.sim`)."""
        return 0

    # ------------------------------------------------------------------ sessions
    def session_coverage(self, leaf: TreeNode) -> Iterable[TreeNode]:
        """Nodes whose data of this component a session anchored at `leaf` keeps for its
        next turn (evicted after every uncovered node). Default: the whole path, as attention
        over every token needs."""
        return self.tree.path_to_root(leaf)

    # ------------------------------------------------------------------ checks
    def check_invariants(self, errors: list[str]) -> None:
        """Appends a message for every broken invariant of this component."""
        evictable = protected = 0
        i = self.index
        for node in self.tree.nodes():
            d = node.data[i]
            if d.lock_ref < 0:
                errors.append(f"{self.name}: {node} lock_ref={d.lock_ref} < 0")
            if d.value is not None:
                if d.lock_ref > 0:
                    protected += self.value_len(node)
                else:
                    evictable += self.value_len(node)
        if (evictable, protected) != (self.evictable_tokens, self.protected_tokens):
            errors.append(
                f"{self.name}: ledger evictable={self.evictable_tokens} "
                f"protected={self.protected_tokens}, tree holds evictable={evictable} "
                f"protected={protected}"
            )


def overriding(components: Sequence[TreeComponent], hook: str) -> list[TreeComponent]:
    """The components whose class overrides `TreeComponent.<hook>`: only they are called for
    it on the hot path (the default does nothing)."""
    default = getattr(TreeComponent, hook)
    return [c for c in components if getattr(type(c), hook) is not default]


MatchRules = tuple[tuple[int, ...], tuple[tuple[int, int], ...]]


def match_rules(components: Sequence[TreeComponent]) -> MatchRules:
    """What a match's end needs, for the tree walk to check inline (`TreeCore.match`'s
    `required` and `windows`): the indices whose data it must hold, and the (index, window)
    pairs whose last window above it must hold theirs."""
    required = tuple(c.index for c in components if c.match_requires_value)
    windows = tuple((c.index, c.match_window) for c in components if c.match_window)
    return required, windows
