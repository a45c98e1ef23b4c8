"""SessionCache: keeps a session's context covered between its turns, so that a burst of other
traffic evicts it last.

A multi-turn chat or an agent sends turn after turn on the same growing context. When a turn
finishes, the node ending its cached key (the session's *leaf*) is registered, and every
component marks its *coverage* from there (`TreeComponent.session_coverage`): Full the whole
path, SWA the window plus one page before the leaf, Mamba the leaf's state. The next turn's
leaf replaces the coverage (forward as the context grows, backward on a retry).

Covered data stays evictable (coverage is not a lock and moves no ledger), but eviction
takes it after everything else:

- Full's evictable leaves are ordered by `(covered, policy key)`, so covered leaves come last;
- SWA/Mamba (any component with an `lru: LRUList`) walk their list twice: first passing over
  covered nodes (and leaves carrying any covered data, which would go whole), then, only if
  the request is still not met, taking covered nodes too. Such evictions are counted in
  `evicted_while_covered`: coverage never blocks eviction.

The cascade spares covered data when the trigger is not covered (`uniradix.eviction`): SWA
KV far behind a session's window may go while path-covered data of a lower priority on the
same node stays. (Built-in Mamba never needs it: a covered state's node has its SWA covered.)

`release_session` drops a session's coverage (the nodes become ordinary LRU citizens; nothing
is freed). Released ids are remembered (`settings.session_closed_memory`, oldest forgotten
first) so that a late finished turn of a closed session does not cover anything again.

`NullSessions` is the object a cache without sessions holds: every hook is a pass-through.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from uniradix.tree.lru import LRUList
from uniradix.tree.node import TreeNode

if TYPE_CHECKING:
    from uniradix.components.base import TreeComponent
    from uniradix.tree.core import TreeCore
    from uniradix.types import CacheSettings


@dataclass(frozen=True, slots=True)
class SessionRelease:
    """What `release_session` gave up: the nodes its coverage held (any component) and the
    Full units among them, and the slots of a streaming turn it freed."""

    session_id: str
    covered_nodes: int = 0
    covered_tokens: int = 0
    streaming_tokens: int = 0


@dataclass(frozen=True, slots=True)
class SessionStats:
    open: int
    opened: int
    released: int
    registered_turns: int
    ignored_late_turns: int
    evicted_while_covered: int
    covered_nodes: int


class _Refs:
    """Coverage of one node: per component, how many sessions cover it, and which do."""

    __slots__ = ("counts", "holders")

    def __init__(self, num_components: int) -> None:
        self.counts = [0] * num_components
        self.holders: dict[str, tuple[int, ...]] = {}


class NullSessions:
    """No session cache: nothing is covered, eviction order is the components' own."""

    enabled = False

    def eviction_candidates(self, component: TreeComponent) -> Iterator[TreeNode]:
        return component.eviction_candidates()

    def register(self, session_id: str | None, leaf: TreeNode) -> None:
        return

    def open_session(self, session_id: str) -> None:
        raise ValueError(
            f"open_session({session_id!r}): the session cache is off "
            "(CacheSettings.enable_session_cache)"
        )

    def release_session(self, session_id: str) -> SessionRelease:
        return SessionRelease(session_id)

    def is_covered(self, node: TreeNode, index: int = 0) -> bool:
        return False

    def reset(self) -> None:
        return

    def check_invariants(self, errors: list[str]) -> None:
        return

    def stats(self) -> SessionStats:
        return SessionStats(0, 0, 0, 0, 0, 0, 0)


class SessionCache:
    enabled = True

    def __init__(
        self, tree: TreeCore, components: Sequence[TreeComponent], settings: CacheSettings
    ) -> None:
        memory = settings.session_closed_memory
        if not isinstance(memory, int) or memory < 0:
            raise ValueError(f"session_closed_memory must be an int >= 0, got {memory!r}")
        self.tree = tree
        self.components = list(components)
        self.closed_memory = memory
        self._refs: dict[TreeNode, _Refs] = {}
        self._sessions: dict[str, dict[TreeNode, None]] = {}  # id -> covered nodes (ordered)
        self._closed: OrderedDict[str, None] = OrderedDict()
        self.opened = self.released = self.registered_turns = 0
        self.ignored_late_turns = self.evicted_while_covered = 0
        # Covered leaves sort after every uncovered one, then by the policy's own key.
        refs, policy = self._refs, tree.leaves.policy
        tree.leaves.policy = lambda node: (node in refs, policy(node))
        tree.split_hooks.append(self)

    # ------------------------------------------------------------------ sessions
    def open_session(self, session_id: str) -> None:
        """Opens `session_id` (reopens a released one). Opening an open session is a no-op."""
        if not isinstance(session_id, str) or not session_id:
            raise TypeError(f"session_id must be a non-empty str, got {session_id!r}")
        if session_id in self._sessions:
            return
        self._closed.pop(session_id, None)
        self._sessions[session_id] = {}
        self.opened += 1

    def release_session(self, session_id: str) -> SessionRelease:
        """Drops the session's coverage and remembers it as closed. Frees nothing; releasing
        an unknown or closed session returns an empty `SessionRelease`."""
        nodes = self._sessions.pop(session_id, None)
        if nodes is None:
            return SessionRelease(session_id)
        self._remember_closed(session_id)
        self.released += 1
        in_tree = [n for n in nodes if n.parent is not None]
        full_units = sum(n.num_tokens for n in in_tree if self._covers(n, session_id, 0))
        for node in nodes:
            self._uncover(node, session_id)
        return SessionRelease(session_id, len(in_tree), full_units)

    def register(self, session_id: str | None, leaf: TreeNode) -> None:
        """A finished turn of `session_id` ends at `leaf`: its coverage replaces the session's
        previous one. Opens an unknown session; ignores (and counts) a closed one."""
        if session_id is None:
            return
        if session_id in self._closed:
            self.ignored_late_turns += 1
            return
        self.open_session(session_id)
        self.registered_turns += 1
        nodes = self._sessions[session_id]
        if len(nodes) and next(reversed(nodes)) is leaf:
            return  # same leaf as last turn: the coverage is already right
        for node in list(nodes):
            self._uncover(node, session_id)
        nodes.clear()
        coverage: dict[TreeNode, list[int]] = {}
        for c in self.components:
            for node in c.session_coverage(leaf):
                coverage.setdefault(node, []).append(c.index)
        for node in reversed(coverage):  # root side first, the leaf last
            self._cover(node, session_id, tuple(coverage[node]))

    def is_covered(self, node: TreeNode, index: int = 0) -> bool:
        refs = self._refs.get(node)
        return refs is not None and refs.counts[index] > 0

    # ------------------------------------------------------------------ tree hooks
    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        """The new parent is covered wherever it took over covered data of `child`."""
        refs = self._refs.get(child)
        if refs is None:
            return
        for sid, indices in list(refs.holders.items()):
            kept = tuple(i for i in indices if self.components[i].has_value(parent))
            if kept:
                self._cover(parent, sid, kept)

    def eviction_candidates(self, component: TreeComponent) -> Iterator[TreeNode]:
        """`component`'s victims, covered data last (see the module docstring)."""
        lru = getattr(component, "lru", None)
        if component.index == 0 or not isinstance(lru, LRUList):
            yield from self._counted(component, component.eviction_candidates())
            return
        i, refs, leaves = component.index, self._refs, self.tree.leaves

        def spared(node: TreeNode) -> bool:
            r = refs.get(node)
            return r is not None and (r.counts[i] > 0 or node in leaves)

        node = lru.least_recent_unlocked()
        while node is not None:
            if spared(node):
                node = lru.least_recent_unlocked(node)
                continue
            after = lru.least_recent_unlocked(node)
            yield node  # the caller evicts it before asking again
            if after is None or after not in lru or after.data[i].lock_ref:
                after = lru.least_recent_unlocked()
            node = after
        yield from self._counted(component, component.eviction_candidates())

    def _counted(self, component: TreeComponent, victims: Iterator[TreeNode]) -> Iterator[TreeNode]:
        for node in victims:
            if node in self._refs:
                self.evicted_while_covered += 1
            yield node
            if node.parent is None and node in self._refs:
                self._forget(node)

    # ------------------------------------------------------------------ coverage
    def _cover(self, node: TreeNode, sid: str, indices: tuple[int, ...]) -> None:
        refs = self._refs.get(node)
        if refs is None:
            refs = self._refs[node] = _Refs(len(self.components))
            self.tree.leaves.refresh(node)  # its eviction key changed
        old = refs.holders.get(sid, ())
        merged = tuple(sorted(set(old) | set(indices)))
        for i in merged:
            if i not in old:
                refs.counts[i] += 1
        refs.holders[sid] = merged
        self._sessions[sid][node] = None

    def _uncover(self, node: TreeNode, sid: str) -> None:
        refs = self._refs.get(node)
        if refs is None:
            return
        for i in refs.holders.pop(sid, ()):
            refs.counts[i] -= 1
        if not refs.holders:
            del self._refs[node]
            self.tree.leaves.refresh(node)

    def _covers(self, node: TreeNode, sid: str, index: int) -> bool:
        refs = self._refs.get(node)
        return refs is not None and index in refs.holders.get(sid, ())

    def _forget(self, node: TreeNode) -> None:
        """`node` left the tree: no session covers it any more."""
        refs = self._refs.pop(node)
        for sid in refs.holders:
            self._sessions[sid].pop(node, None)

    def _remember_closed(self, session_id: str) -> None:
        if self.closed_memory == 0:
            return
        self._closed[session_id] = None
        self._closed.move_to_end(session_id)
        while len(self._closed) > self.closed_memory:
            self._closed.popitem(last=False)

    def is_closed(self, session_id: str) -> bool:
        return session_id in self._closed

    def reset(self) -> None:
        """The tree was emptied: every coverage goes; sessions stay open, closed ones closed."""
        self._refs.clear()
        for nodes in self._sessions.values():
            nodes.clear()

    def stats(self) -> SessionStats:
        return SessionStats(
            len(self._sessions),
            self.opened,
            self.released,
            self.registered_turns,
            self.ignored_late_turns,
            self.evicted_while_covered,
            len(self._refs),
        )

    # ------------------------------------------------------------------ checks
    def check_invariants(self, errors: list[str]) -> None:
        counts: dict[TreeNode, list[int]] = {}
        for sid, nodes in self._sessions.items():
            for node in nodes:
                refs = self._refs.get(node)
                if refs is None or sid not in refs.holders:
                    errors.append(f"sessions: {sid!r} lists {node} but does not cover it")
                    continue
                per = counts.setdefault(node, [0] * len(self.components))
                for i in refs.holders[sid]:
                    per[i] += 1
        for node, refs in self._refs.items():
            if refs.counts != counts.get(node):
                errors.append(
                    f"sessions: {node} coverage counts {refs.counts}, sessions give "
                    f"{counts.get(node)}"
                )
            if not refs.holders:
                errors.append(f"sessions: {node} is kept with no session covering it")
        if len(self._closed) > self.closed_memory:
            errors.append(f"sessions: {len(self._closed)} closed ids > {self.closed_memory}")
