"""EventRecorder: the cache's event sink. It records what the cache executed (a new leaf's
full KV stored, a leaf's full KV removed, a reset; with a host tier also revival, load-back,
demotion, host backup and host eviction, each on its medium) and, at each flush that
publishes (once per scheduler step, or per `KVEventStream` interval), turns it into
coalesced `BlockStored` / `BlockRemoved` / `AllBlocksCleared` events.

A cache operation pays only for appending a tuple to a log (a remove also reads the node's
digests, known since its store's step, while the node is still attached). Everything else
waits for `take_events()`, once per published batch: which nodes are new (a component may
have split a new leaf before the cache reports it: its never-announced ancestors are stored
with it), parents' hashes, tokens, media, coalescing. The log is derived earlier only when a
node stored since is removed, as its pages must be named while it is attached. Page digests
come from the cache's `NodeDigests` (shared with L3 storage keys) as cells hashed when read:
the flush only names them, and whoever makes the events hashes them (the ZMQ publisher's
sender thread, off the scheduler's thread and, as the native chain releases the GIL, on
another core; a null publisher never does). Each page is hashed once while its node lives, a
split keeps them, and a remove names them again instead of hashing.
Per step, in execution order::

    store(node)   -> BlockStored(hashes of node's pages, parent = parent's last hash)
    remove(node)  -> BlockRemoved(node's hashes, deepest first)
    reset()       -> AllBlocksCleared (what came before it in the step is dropped)

Consecutive stores that chain (same medium and namespace) and consecutive removes of one
medium are merged into one event, as SGLang does. The flush stops at those runs (`take_step`,
`uniradix.events.packed`): their arrays and events are made by whoever reads them.

A store and a remove of the same pages within one step are both sent, as vLLM and SGLang
do: cancelling them is only sound when no other store of the step chains from those pages
(a host store of a child, say), and a router applying both ends where it started.

EAGLE (bigram) caches publish SGLang's bigram chain (both tokens of each pair hashed, what
the SGLang router computes for EAGLE workers) with each page's original token ids: a page
of N bigram units `(t[i], t[i+1])` carries `t[i]`, N tokens, so `len(token_ids) ==
len(block_hashes) * block_size` holds as llm-d and Dynamo need (SGLang sends the pairs,
which llm-d and SGLang's own typed decoder cannot read: sglang#39610).
"""

from __future__ import annotations

from collections.abc import Callable

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.event_sink import MEDIA, MEDIUM_CPU_PINNED, MEDIUM_DISK, MEDIUM_GPU
from uniradix.events.packed import PackedStored, StepEvents, StepRun, StoredShape
from uniradix.events.types import KVEvent
from uniradix.hashing.events import block_hashing
from uniradix.hashing.node_digests import NodeDigests, PageDigests
from uniradix.tree.node import TreeNode


def holds(node: TreeNode, medium: str) -> bool:
    """Whether `node`'s full KV is on `medium` as announced: device slots (a load-back's as
    soon as submitted), a host copy once its backup was acked."""
    d = node.data[0]
    if medium == MEDIUM_GPU:
        return d.value is not None
    if medium == MEDIUM_CPU_PINNED:
        return d.host_value is not None and "write" not in (d.metadata or {})
    return False


# What a cache call leaves in the log: a store is (node, its parent then, medium), a remove
# (node, its digests named while it was attached, medium).
_Record = tuple[TreeNode, TreeNode | PageDigests | None, str]


class EventRecorder:
    """A `CacheEventSink` for one cache. `group_idx` / `kv_cache_spec_kind` describe the
    published (full-attention) group in map events; `cache_salt` seeds every chain;
    `hash_algo` (`uniradix.hashing.events.HASH_ALGOS`) picks the block hash, `hash_seed` is
    vLLM's `PYTHONHASHSEED` for `vllm_sha256_cbor`."""

    def __init__(
        self,
        cache: UnifiedRadixCache,
        cache_salt: str | None = None,
        group_idx: int | None = 0,
        kv_cache_spec_kind: str | None = "full_attention",
        hash_algo: str = "sglang_sha256",
        hash_seed: str | None = None,
    ) -> None:
        self.cache = cache
        self.block_size = cache.page_size
        self.cache_salt = cache_salt or None
        self._bigram = cache.settings.is_eagle
        self.hashing = block_hashing(hash_algo, cache_salt, hash_seed, self._bigram)
        self._seed, self._hasher = self.hashing.seed, self.hashing.hasher
        self.digests = NodeDigests.of_tree(cache.tree, self._bigram)
        self._shape = StoredShape(
            self.block_size, self.cache_salt, group_idx, kv_cache_spec_kind, self._bigram
        )
        # Per medium, the digests of the nodes announced there (a remove names them in one
        # lookup), as of the last derived store and every remove.
        self._held: dict[str, dict[TreeNode, PageDigests]] = {m: {} for m in MEDIA}
        self._tables = tuple(self._held.values())
        self._log: list[_Record] = []  # records not derived yet, in execution order
        self._underived: set[TreeNode] = set()  # nodes stored (or split off) in `_log`
        self._runs: list[StepRun] = []  # the step's derived records, coalesced
        self._cleared = False
        # Where auxiliary L3 stores go (`on_aux_stored`): the stream's group tracker, if any.
        self.aux_listener: Callable[[TreeNode, int, int, str], None] | None = None

    # ------------------------------------------------------------------ sink
    # The cache's calls only append to `_log`: which nodes are new, their parents' hashes,
    # their digests, tokens and media are derived from it at the flush (`_derive`), in
    # execution order, or earlier when a node stored since is about to leave the tree.
    def on_stored(self, node: TreeNode, medium: str) -> None:
        self._underived.add(node)
        self._log.append((node, node.parent, medium))

    def on_removed(self, node: TreeNode, medium: str) -> None:
        if node in self._underived:  # its store must be read while it is attached
            self._derive()
        cell = self._held[medium].pop(node, None)
        if cell is None:
            return  # never announced there (cached before the recorder came): nothing to undo
        self._log.append((node, cell, medium))

    def on_aux_stored(self, node: TreeNode, component: int, pages: int, medium: str) -> None:
        if self.aux_listener is not None:
            self.aux_listener(node, component, pages, medium)

    def on_cleared(self) -> None:
        self._log.clear()
        self._underived.clear()
        self._runs.clear()
        self._cleared = True
        for held in self._held.values():
            held.clear()
        self.digests.clear()

    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        # Digests follow the split in `NodeDigests` (the same two cells); an underived store
        # keeps its span.
        pages = split_len // self.block_size
        for held in self._held.values():
            cell = held.get(child)
            if cell is not None:
                held[parent], held[child] = cell.split(pages, parent.key, child.key)
        if child in self._underived:
            self._underived.add(parent)

    # ------------------------------------------------------------------ derivation
    def _derive(self) -> None:
        """Turns the log into coalesced runs, updating the announced media."""
        log, self._log = self._log, []
        self._underived.clear()
        for node, where, medium in log:
            if isinstance(where, PageDigests):
                self._derive_remove(node, where, medium)
            else:
                self._derive_store(node, where, medium)

    def _known(self, node: TreeNode) -> bool:
        """Whether `node` is announced on some medium."""
        for held in self._tables:  # noqa: SIM110 (a generator costs twice as much)
            if node in held:
                return True
        return False

    def _derive_remove(self, node: TreeNode, cell: PageDigests, medium: str) -> None:
        if not self._known(node):  # its pages left every tier
            self.digests.forget(node)
        runs = self._runs
        tail = runs[-1] if runs else None
        if tail is None or not tail.removed or tail.medium != medium:
            tail = StepRun(medium, True)
            runs.append(tail)
        tail.cells.append(cell)

    def _derive_store(self, node: TreeNode, parent: TreeNode | None, medium: str) -> None:
        """`node`'s pages below `parent` (its parent when stored: splits since may have cut
        them into several nodes) entered `medium`; so did those of any ancestors never
        announced (a component may split a new leaf before the cache reports it)."""
        assert parent is not None
        known = self._known
        anchor = parent
        if not known(node):
            while anchor.num_tokens and not known(anchor):
                anchor = anchor.parent  # type: ignore[assignment]
        path, n = [], node
        while n is not anchor:
            path.append(n)
            n = n.parent  # type: ignore[assignment]
        path.reverse()
        root = not anchor.num_tokens
        lora_name = node.extra_key
        digests, seed, hasher = self.digests, self._seed, self._hasher
        runs = self._runs
        tail = runs[-1] if runs else None
        if (
            tail is None
            or tail.removed
            or tail.medium != medium
            or tail.lora_name != lora_name
            or root
            or tail.end is not anchor
        ):
            # The parent's hash is read from the anchor's digests when the event is made.
            prior = None if root else digests.cell(anchor, seed, hasher)
            tail = StepRun(medium, False, lora_name, prior)
            runs.append(tail)
        # L3 copies outlive the tree: a known node's are not tracked (docs/storage.md).
        held = self._held[medium]
        track_all = medium != MEDIUM_DISK
        for n in path:
            cell = digests.cell(n, seed, hasher)
            if track_all or not known(n):
                held[n] = cell
            tail.cells.append(cell)
            tail.units.append(n.key)
        tail.end = node

    def hashes(self, node: TreeNode) -> list[int]:
        """Published hashes of `node`'s pages (root side first)."""
        values: list[int] = self.hashing.published(
            self.digests.node(node, self._seed, self._hasher)
        ).tolist()
        return values

    def tokens(self, node: TreeNode) -> list[int]:
        """Token ids of `node`'s pages (each EAGLE pair's first token)."""
        values: list[int] = self._shape.tokens(node.key).tolist()
        return values

    # ------------------------------------------------------------------ events
    @property
    def pending(self) -> bool:
        """Whether anything was recorded since the last `take_step()`."""
        return bool(self._log or self._runs or self._cleared)

    def empty_step(self) -> StepEvents:
        """A step without events (what a flush that publishes nothing returns)."""
        return StepEvents(False, [], self.hashing.published, self._shape)

    def take_events(self) -> list[KVEvent]:
        """The step's events, coalesced, in execution order; empties the record."""
        return self.take_step().events()

    def take_step(self) -> StepEvents:
        """`take_events()` left as the step's runs (`uniradix.events.packed`): made into
        arrays and events by whoever reads them; a publisher that sends bytes encodes them
        without a Python int per hash and token."""
        self._derive()
        runs, self._runs = self._runs, []
        for run in runs:
            # The sender thread must not hold tree nodes: dropping them there writes their
            # reference counts from another core, under the scheduler's next `match`.
            run.end = None
        cleared, self._cleared = self._cleared, False
        return StepEvents(cleared, runs, self.hashing.published, self._shape)

    def snapshot(self, medium: str = MEDIUM_GPU) -> list[KVEvent]:
        """`BlockStored` events for every node the cache holds on `medium`, parents first:
        what a subscriber needs after `AllBlocksCleared` to know the whole content again.
        Hashes nodes stored before the recorder was attached. Call after `take_events()`."""
        if medium not in MEDIA:
            raise ValueError(f"unknown medium {medium!r}; choose from {MEDIA}")
        events: list[KVEvent] = []
        published = self.hashing.published
        for node in self.cache.tree.nodes():
            if not holds(node, medium):
                continue
            cell = self.digests.cell(node, self._seed, self._hasher)
            self._held[medium][node] = cell
            parent = node.parent
            assert parent is not None
            parent_hash = None
            if parent.num_tokens:
                parent_hash = int(
                    published(self.digests.last(parent, self._seed, self._hasher) or b"")[0]
                )
            packed = PackedStored(
                published(cell.blob()), parent_hash, node.key, medium, node.extra_key, self._shape
            )
            events.append(packed.event())
        return events
