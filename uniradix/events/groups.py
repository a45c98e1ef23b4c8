"""Events per KV-cache group: what a hybrid cache's SWA windows and Mamba states hold, in
vLLM's hybrid fields (`group_idx`, `kv_cache_spec_kind`, `kv_cache_spec_sliding_window`).

The recorder publishes the full-attention component (group 0, `full_attention`): a router
reading only that believes an instance can resume wherever it holds full pages, but a
hybrid cache resumes only where the window before the boundary has live SWA KV and a Mamba
state sits at the boundary. `GroupTracker` publishes those too, one group per auxiliary
component (its index in the cache: SWA `sliding_window` with its window, Mamba `mamba`):

- SWA: `BlockStored` for the pages of every node whose SWA KV is live, `BlockRemoved` when
  it is tombstoned or leaves the medium;
- Mamba: `BlockStored` for the last page of every node holding a state (the state at that
  page boundary), `BlockRemoved` when the state goes.

Hashes are the full group's page hashes (the same chain: a router joins groups on them),
parents the page before, token ids the pages' tokens, on `GPU` and, with a host tier,
`CPU_PINNED` (an auxiliary host copy counts once the node's full host copy is committed).
With L3 storage, the windows and states a backup stored (each node's trailing window pages,
its state) are published on `DISK` as the writes land, after the chain's full pages; as
for full pages on `DISK`, never removed and not in snapshots (L3 evicts on its own).
Auxiliary state changes inside components without a hook, so `take()` compares the holders
with what it published last, once per published batch: each component's LRU list (its
device holders), or with a host tier a walk over the tree's nodes; each node's published
hashes are kept between walks (splits change them, nothing else does).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from uniradix.components.base import TreeComponent
from uniradix.event_sink import MEDIUM_CPU_PINNED, MEDIUM_GPU
from uniradix.events.recorder import EventRecorder, holds
from uniradix.events.types import BlockRemoved, BlockStored, KVEvent
from uniradix.tree.lru import LRUList
from uniradix.tree.node import TreeNode
from uniradix.types import ComponentKey, ComponentType

COMPONENTS = ("auto", "full", "all")
KIND_FULL = "full_attention"
KIND_SWA = "sliding_window"
KIND_MAMBA = "mamba"
_KINDS: dict[ComponentKey, str] = {ComponentType.SWA: KIND_SWA, ComponentType.MAMBA: KIND_MAMBA}


def check_components(components: str) -> str:
    if components not in COMPONENTS:
        raise ValueError(f"unknown components {components!r}; choose from {COMPONENTS}")
    return components


def publishes_groups(components: str, aux_components: int, wire: str = "map") -> bool:
    """Whether a stream publishes auxiliary groups: `all` always, `auto` when the cache
    has auxiliary components and the wire shape has room for groups (not `sglang-array`),
    `full` never (SGLang's full-only stream, for consumers that read every store as full
    attention: the SGLang router, SMG)."""
    check_components(components)
    if components == "all" and wire == "sglang-array":
        raise ValueError("components='all' needs a wire shape with group fields, not sglang-array")
    if components == "auto":
        return aux_components > 0 and wire != "sglang-array"
    return components == "all"


def _holds_aux(node: TreeNode, index: int, medium: str) -> bool:
    d = node.data[index]
    if medium == MEDIUM_GPU:
        return d.value is not None and holds(node, medium)
    return d.host_value is not None and holds(node, medium)


def _holders(component: TreeComponent) -> Iterable[TreeNode]:
    """The nodes holding `component`'s device value: its LRU list (SWA, Mamba), or every
    node of the tree for a component without one."""
    lru = getattr(component, "lru", None)
    return lru if isinstance(lru, LRUList) else component.tree.nodes()


def _runs(flags: list[bool]) -> Iterator[tuple[int, int]]:
    """[start, stop) of every run of True in `flags`."""
    start = None
    for i, flag in enumerate(flags):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            yield start, i
            start = None
    if start is not None:
        yield start, len(flags)


class GroupTracker:
    """Publishes the auxiliary components of `recorder`'s cache as groups (module doc)."""

    def __init__(self, recorder: EventRecorder) -> None:
        self.recorder = recorder
        cache = recorder.cache
        self.groups: list[tuple[TreeComponent, str, int | None]] = []
        for c in cache.components[1:]:
            kind = _KINDS.get(c.component_type)
            if kind is None:
                raise ValueError(f"no KV-cache group kind for component {c.name!r}")
            window = getattr(c, "window", None) if kind == KIND_SWA else None
            self.groups.append((c, kind, window))
        self.media = [MEDIUM_GPU]
        if cache.host_tier.enabled:
            self.media.append(MEDIUM_CPU_PINNED)
        # Per (group, medium): node -> its published hashes there.
        self._published: dict[tuple[int, str], dict[TreeNode, tuple[int, ...]]] = {
            (c.index, m): {} for c, _, _ in self.groups for m in self.media
        }
        self._pages: dict[TreeNode, tuple[int, tuple[int, ...]]] = {}  # (num_tokens, hashes)
        # L3 stores, reported as they land (`on_aux_stored`): nothing to compare them with,
        # as the store outlives the tree and evicts on its own (no removes, docs/storage.md).
        self._by_index = {c.index: (c.index, kind, window) for c, kind, window in self.groups}
        self._landed: list[KVEvent] = []
        recorder.aux_listener = self._aux_stored

    def _aux_stored(self, node: TreeNode, component: int, pages: int, medium: str) -> None:
        """`node`'s last `pages` pages of group `component` landed on `medium`; a split since
        the backup may have moved the upper ones to its ancestors."""
        group = self._by_index[component]
        landed: list[KVEvent] = []
        parent: TreeNode | None = node
        while pages > 0 and parent is not None and parent.num_tokens:
            hashes = self._hashes(parent)[-pages:]
            landed.append(self._stored(parent, hashes, 0, len(hashes), group, medium))
            pages -= len(hashes)
            parent = parent.parent
        self._landed += landed[::-1]

    def _hashes(self, node: TreeNode) -> tuple[int, ...]:
        known = self._pages.get(node)
        if known is None or known[0] != node.num_tokens:
            known = (node.num_tokens, tuple(self.recorder.hashes(node)))
            self._pages[node] = known
        return known[1]

    def _group_pages(self, node: TreeNode, kind: str) -> tuple[int, ...]:
        pages = self._hashes(node)
        return pages[-1:] if kind == KIND_MAMBA else pages

    def _current(self) -> dict[tuple[int, str], dict[TreeNode, tuple[int, ...]]]:
        now: dict[tuple[int, str], dict[TreeNode, tuple[int, ...]]] = {
            key: {} for key in self._published
        }
        if len(self.media) == 1:
            # Device only: each component's LRU list names exactly its holders, far fewer
            # than the tree's nodes (most are SWA / Mamba tombstones).
            for c, kind, _ in self.groups:
                table = now[(c.index, MEDIUM_GPU)]
                for node in _holders(c):
                    if _holds_aux(node, c.index, MEDIUM_GPU):
                        table[node] = self._group_pages(node, kind)
            return now
        for node in self.recorder.cache.tree.nodes():
            for c, kind, _ in self.groups:
                for medium in self.media:
                    if _holds_aux(node, c.index, medium):
                        now[(c.index, medium)][node] = self._group_pages(node, kind)
        return now

    def take(self) -> list[KVEvent]:
        """The groups' changes since the last `take()`: removes, then stores, per group and
        medium."""
        now = self._current()
        events: list[KVEvent] = []
        for c, kind, window in self.groups:
            for medium in self.media:
                old, new = self._published[(c.index, medium)], now[(c.index, medium)]
                gone = [h for n, hs in old.items() if new.get(n) != hs for h in hs]
                came = {n: hs for n, hs in new.items() if old.get(n) != hs}
                kept = {h for hs in came.values() for h in hs}
                removed = [h for h in gone if h not in kept]
                if removed:
                    events.append(BlockRemoved(removed[::-1], medium, group_idx=c.index))
                before = set(gone)
                for node, hs in came.items():
                    for start, stop in _runs([h not in before for h in hs]):
                        events.append(
                            self._stored(node, hs, start, stop, (c.index, kind, window), medium)
                        )
        events += self._landed
        self._landed = []
        self._published = now
        live = {n for table in now.values() for n in table}
        self._pages = {n: p for n, p in self._pages.items() if n in live}
        return events

    def contents(self) -> list[KVEvent]:
        """`BlockStored` for everything published so far (what follows `AllBlocksCleared`
        in a snapshot); call it right after `take()`, before the tree changes again."""
        events: list[KVEvent] = []
        for c, kind, window in self.groups:
            for medium in self.media:
                for node, hs in self._published[(c.index, medium)].items():
                    events.append(
                        self._stored(node, hs, 0, len(hs), (c.index, kind, window), medium)
                    )
        return events

    def _stored(
        self,
        node: TreeNode,
        hashes: tuple[int, ...],
        start: int,
        stop: int,
        group: tuple[int, str, int | None],
        medium: str,
    ) -> BlockStored:
        """`hashes[start:stop]` (the group's pages of `node`) entered `medium`."""
        pages = self._hashes(node)
        first = len(pages) - len(hashes) + start  # a Mamba group holds the last page only
        bs = self.recorder.block_size
        tokens = self.recorder.tokens(node)[first * bs : (first + stop - start) * bs]
        parent = pages[first - 1] if first else self._parent_hash(node)
        index, kind, window = group
        return BlockStored(
            list(hashes[start:stop]),
            parent,
            tokens,
            bs,
            None,
            medium,
            node.extra_key,
            cache_salt=self.recorder.cache_salt,
            group_idx=index,
            kv_cache_spec_kind=kind,
            kv_cache_spec_sliding_window=window,
        )

    def _parent_hash(self, node: TreeNode) -> int | None:
        parent = node.parent
        if parent is None or not parent.num_tokens:
            return None
        return self._hashes(parent)[-1]
