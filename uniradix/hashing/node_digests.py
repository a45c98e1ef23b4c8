"""NodeDigests: every tree node's chained page digests, computed once and kept while the node
lives, shared by everything that names pages of one cache.

The KV events (`uniradix.events`) publish each cached page's digest and the L3 storage keys
(`uniradix.hashing.storage_keys`) are built on the same chain (`uniradix.hashing.page`).
Hashing a page
costs ~0.5 µs of Python per page, so it must happen once per page, not once per event or per
backup: a node's digests are computed on first read from its parent's last digest (hashing
any ancestors not read yet, root side first) and then kept. Naming them is free: `cell()`
gives a `PageDigests` that hashes when read, so the events' flush hands a step's digests to
the publisher's sender thread unhashed, and the scheduler's thread hashes nothing (the native
chain releases the GIL: the hashing runs on another core). `hash_cells` hashes many cells in
one native call, so that thread lets go of the GIL once for a whole gathering of steps: each
time it takes the GIL back from a busy scheduler, it stops it wherever it is. A split
keeps the chain: the new parent takes the first pages' digests and the child the rest,
nothing is rehashed (the table is one of the tree's split hooks). One table per tree:
`NodeDigests.of_tree` finds it among the split hooks or registers it, so an event recorder
and a storage tier of one cache share it.

Chains differ by their root seed (`None`, a salt's, or a namespace's: `hashing.page.salt_seed`,
`namespace_seed`) and by their hasher (SGLang's chain unless a `PageHasher` is given), so the
table keeps one map per (seed, hasher); with no salt and no LoRA the events and the storage
keys both ask for seed `None` and share each digest.

Where it lives, and why: above `tree/` (it reads nodes' keys and follows the tree's splits)
and below the cache, tiers, storage and events (which call it). Not a slot of `TreeNode`:
the seed is a user's choice the tree knows nothing of, and a cache without events or L3
then carries nothing per node and hashes nothing. Hashing is not I/O; the tree still does
none, and still never calls this table except through the split hook it already has.

Lifetime: users `forget` a node whose pages left every tier; entries of nodes detached from
the tree are also dropped in bulk once the table has doubled since it last looked, and the
whole table when the tree was reset, so a user that never forgets leaks nothing for long.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Protocol

from uniradix import native
from uniradix.hashing.page import DIGEST_BYTES, chain_digests
from uniradix.tree.core import TreeCore
from uniradix.tree.node import TreeNode

_MIN_PRUNE = 4096


class PageHasher(Protocol):
    """A chained page hash other than SGLang's (e.g. vLLM's `sha256_cbor`)."""

    def __call__(
        self, units: bytes, page_size: int, prior: bytes | None, lora: str | None, at_root: bool
    ) -> bytes:
        """Digests (32 bytes each, concatenated) of the whole pages of `units`, chained from
        `prior`; `lora` is the node's `extra_key`; `at_root`: the first page starts the
        sequence."""
        ...


ChainId = tuple[bytes | None, PageHasher | None]
# What hashes one node's pages: (units, prior digest or seed, extra_key, at_root) -> blob.
HashFn = Callable[[bytes, bytes | None, str | None, bool], bytes]


class PageDigests:
    """One node's page digests, hashed when first read (`blob()`), by whichever thread reads
    them: the events' flush only names a step's digests and the publisher's sender thread
    hashes them (the native chain releases the GIL, so on another core), off the scheduler's
    thread; an L3 backup reads its keys at once. A cell is its units and the cell (or seed)
    it chains from until hashed, then its bytes. One object per node (the flush makes one per
    new node). Thread-safe by construction: a value is published (`_blob`) before the units
    are dropped, so a reader sees one or the other, and two threads reading one cell at once
    hash it twice at worst, to the same bytes."""

    __slots__ = ("_at_root", "_blob", "_extra_key", "_halves", "_hash_fn", "_prior", "_units")

    def __init__(
        self,
        blob: bytes | None,
        hash_fn: HashFn | None = None,
        units: bytes | None = None,
        extra_key: str | None = None,
        at_root: bool = False,
        prior: PageDigests | bytes | None = None,
    ) -> None:
        self._blob = blob
        self._hash_fn = hash_fn
        self._units = units  # None once hashed
        self._extra_key = extra_key
        self._at_root = at_root
        self._prior = prior
        self._halves: tuple[int, PageDigests, PageDigests] | None = None

    @property
    def hashed(self) -> bool:
        return self._blob is not None

    def blob(self) -> bytes:
        """The digests, 32 bytes a page, root side first; hashes this cell and any cells it
        chains from that are not hashed yet, root side first (`hash_cells`: one native call
        for the whole chain, however deep)."""
        blob = self._blob
        if blob is not None:
            return blob
        hash_cells((self,))
        blob = self._blob
        assert blob is not None
        return blob

    def _hash(self) -> None:
        units, hash_fn = self._units, self._hash_fn
        if units is None or hash_fn is None:
            return  # hashed meanwhile by another thread
        prior = self._prior
        if isinstance(prior, PageDigests):
            prior = prior.blob()[-DIGEST_BYTES:]
        self._blob = hash_fn(units, prior, self._extra_key, self._at_root)
        self._units = None

    def split(self, pages: int, upper: bytes, lower: bytes) -> tuple[PageDigests, PageDigests]:
        """The cells of a node split after `pages` pages into `upper` and `lower` units (the
        tree's split, once per cell: every holder of this cell gets the same two). Hashed
        digests are cut; unhashed ones chain anew from the parts' keys (the chain is per
        page, so the same bytes; this cell, still held by a step's events, keeps its own)."""
        halves = self._halves
        if halves is not None:
            assert halves[0] == pages, "a cell is split once, where its node was"
            return halves[1], halves[2]
        if self._units is None:
            blob = self.blob()
            cut = pages * DIGEST_BYTES
            first, rest = PageDigests(blob[:cut]), PageDigests(blob[cut:])
        else:
            hash_fn, extra_key = self._hash_fn, self._extra_key
            first = PageDigests(None, hash_fn, upper, extra_key, self._at_root, self._prior)
            rest = PageDigests(None, hash_fn, lower, extra_key, False, first)
        self._halves = (pages, first, rest)
        return first, rest


class ChainHash:
    """Hashes nodes' pages in one chain of a `NodeDigests` (SGLang's chain, or a
    `PageHasher`'s), counting them."""

    __slots__ = ("_bigram", "_hasher", "_page_size", "_table")

    def __init__(self, table: NodeDigests, hasher: PageHasher | None) -> None:
        self._table = table
        self._page_size = table.page_size
        self._bigram = table.bigram
        self._hasher = hasher

    def __call__(
        self, units: bytes, prior: bytes | None, extra_key: str | None, at_root: bool
    ) -> bytes:
        if self._hasher is None:
            blob = chain_digests(units, self._page_size, prior, self._bigram)
        else:
            blob = self._hasher(units, self._page_size, prior, extra_key, at_root)
        self._table.count(len(blob) // DIGEST_BYTES)
        return blob

    def many(self, cells: list[PageDigests]) -> None:
        """Hashes `cells` (unhashed, each after any of them it chains from) in one native
        call where there is one for this chain, else one by one."""
        if self._hasher is not None or not native.HAVE_NATIVE:
            for cell in cells:
                cell._hash()
            return
        position = {id(cell): i for i, cell in enumerate(cells)}
        units: list[bytes] = []
        priors: list[bytes | int | None] = []
        for cell in cells:
            key, prior = cell._units, cell._prior
            if key is None:  # hashed meanwhile by another thread: passes its last digest on
                units.append(b"")
                priors.append(cell.blob()[-DIGEST_BYTES:])
                continue
            units.append(key)
            if isinstance(prior, PageDigests):
                at = position.get(id(prior))
                priors.append(at if at is not None else prior.blob()[-DIGEST_BYTES:])
            else:
                priors.append(prior)
        blobs = native.chain_digests_many(units, priors, self._page_size, self._bigram)
        pages = 0
        for cell, key, blob in zip(cells, units, blobs, strict=True):
            if key:
                cell._blob = blob
                cell._units = None
                pages += len(blob)
        self._table.count(pages // DIGEST_BYTES)


def hash_cells(cells: Iterable[PageDigests]) -> None:
    """Hashes every unhashed cell of `cells` and the cells they chain from, root side first,
    one native call per chain: a thread hashing a step's digests beside a busy caller then
    waits for the GIL once, not once per node (`PageDigests.blob` releases it per cell)."""
    pending: dict[int, PageDigests] = {}  # insertion order: each cell after its prior
    for cell in cells:
        path: list[PageDigests] = []
        c: PageDigests | bytes | None = cell
        while isinstance(c, PageDigests) and c._units is not None and id(c) not in pending:
            path.append(c)
            c = c._prior
        for c in reversed(path):
            pending[id(c)] = c
    groups: dict[int, tuple[ChainHash, list[PageDigests]]] = {}
    for cell in pending.values():
        hash_fn = cell._hash_fn
        if isinstance(hash_fn, ChainHash):
            groups.setdefault(id(hash_fn), (hash_fn, []))[1].append(cell)
        else:
            cell._hash()
    for hash_fn, group in groups.values():
        hash_fn.many(group)


class NodeDigests:
    """Page digests (`hashing.page.chain_digests` blobs: 32 bytes per page, root side first) of
    the nodes of one tree, per chain seed. `bigram` hashes EAGLE bigram units."""

    def __init__(self, tree: TreeCore, bigram: bool = False) -> None:
        self.tree = tree
        self.page_size = tree.page_size
        self.bigram = bigram
        self._chains: dict[ChainId, dict[TreeNode, PageDigests]] = {}
        self._hash_fns: dict[ChainId, ChainHash] = {}
        self._root = tree.root
        self._prune_at = _MIN_PRUNE
        self.pages_hashed = 0  # pages hashed since creation (a split or reuse hashes none)
        self._count_lock = threading.Lock()

    @classmethod
    def of_tree(cls, tree: TreeCore, bigram: bool = False) -> NodeDigests:
        """The tree's table (registered as a split hook on first use)."""
        for hook in tree.split_hooks:
            if isinstance(hook, NodeDigests):
                if hook.bigram != bigram:
                    raise ValueError(f"the tree's digests have bigram={hook.bigram}, not {bigram}")
                return hook
        table = cls(tree, bigram)
        tree.split_hooks.append(table)
        return table

    # ------------------------------------------------------------------ lookups
    def node(self, node: TreeNode, seed: bytes | None, hasher: PageHasher | None = None) -> bytes:
        """`node`'s page digests in the chain rooted at `seed`; hashes what is not hashed
        yet. `node` must be in the tree."""
        return self.cell(node, seed, hasher).blob()

    def cell(
        self, node: TreeNode, seed: bytes | None, hasher: PageHasher | None = None
    ) -> PageDigests:
        """`node`'s digests as a cell, hashed when read: naming a node's pages costs no
        hashing (cells are made for any ancestors not known yet). `node` must be in the
        tree."""
        chain_id = (seed, hasher)
        chain = self._chains.get(chain_id)
        if chain is None:
            chain = self._chains[chain_id] = {}
        cell = chain.get(node)
        if cell is not None:
            return cell
        if self.tree.root is not self._root:  # reset: every node known so far is gone
            self.clear()
            chain = self._chains[chain_id] = {}
        missing: list[TreeNode] = []
        n = node
        while n.num_tokens and n not in chain:
            missing.append(n)
            if n.parent is None:
                raise ValueError(f"{node} is not in the tree")
            n = n.parent
        at_root = not n.num_tokens
        prior: PageDigests | bytes | None = seed if at_root else chain[n]
        hash_fn = self._hash_fn(chain_id)
        for m in reversed(missing):
            prior = chain[m] = PageDigests(None, hash_fn, m.key, m.extra_key, at_root, prior)
            at_root = False
        if len(chain) > self._prune_at:
            self._prune(chain)
        return chain[node]

    def _hash_fn(self, chain_id: ChainId) -> ChainHash:
        """What hashes one node's pages in chain `chain_id`."""
        hash_fn = self._hash_fns.get(chain_id)
        if hash_fn is None:
            hash_fn = self._hash_fns[chain_id] = ChainHash(self, chain_id[1])
        return hash_fn

    def count(self, pages: int) -> None:
        with self._count_lock:  # the sender thread hashes too
            self.pages_hashed += pages

    def last(
        self, node: TreeNode, seed: bytes | None, hasher: PageHasher | None = None
    ) -> bytes | None:
        """The digest a child of `node` chains from: `node`'s last page's, or `seed` at the
        root."""
        if node.num_tokens == 0:
            return seed
        return self.node(node, seed, hasher)[-DIGEST_BYTES:]

    def span(
        self,
        node: TreeNode,
        ancestor: TreeNode,
        seed: bytes | None,
        hasher: PageHasher | None = None,
    ) -> bytes:
        """Digests of the pages below `ancestor` down to the end of `node` (root side first),
        over however many nodes splits have made of that span since."""
        pieces = []
        n = node
        while n is not ancestor:
            pieces.append(self.node(n, seed, hasher))
            if n.parent is None:
                raise ValueError(f"{ancestor} is not an ancestor of {node}")
            n = n.parent
        return pieces[0] if len(pieces) == 1 else b"".join(reversed(pieces))

    def path(self, node: TreeNode, seed: bytes | None, hasher: PageHasher | None = None) -> bytes:
        """Digests of every page from the root to the end of `node`."""
        root = node
        while root.parent is not None:
            root = root.parent
        return self.span(node, root, seed, hasher)

    # ------------------------------------------------------------------ upkeep
    def forget(self, node: TreeNode) -> None:
        """Drops `node`'s digests from every chain (its pages left every tier)."""
        for chain in self._chains.values():
            chain.pop(node, None)

    def clear(self) -> None:
        self._chains.clear()
        self._root = self.tree.root
        self._prune_at = _MIN_PRUNE

    def redistribute_on_split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        for chain in self._chains.values():
            cell = chain.get(child)
            if cell is not None:
                chain[parent], chain[child] = cell.split(
                    split_len // self.page_size, parent.key, child.key
                )

    def _prune(self, chain: dict[TreeNode, PageDigests]) -> None:
        for n in [n for n in chain if n.parent is None]:
            del chain[n]
        self._prune_at = max(_MIN_PRUNE, 2 * len(chain))

    def __len__(self) -> int:
        """Nodes with digests, over all chains."""
        return sum(len(chain) for chain in self._chains.values())
