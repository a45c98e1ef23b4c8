"""NodeDigests: every tree node's chained page digests, computed once and kept while the node
lives, shared by everything that names pages of one cache.

The KV events (`uniradix.events`) publish each cached page's digest and the L3 storage keys
(`uniradix.storage.keys`) are built on the same chain (`uniradix.page_hash`). Hashing a page
costs ~0.5 µs of Python per page, so it must happen once per page, not once per event or per
backup: a node's digests are computed on first use from its parent's last digest (hashing any
ancestors not known yet, root side first) and then kept. A split keeps the chain: the new
parent takes the first pages' digests and the child the rest, nothing is rehashed (the table
is one of the tree's split hooks). One table per tree: `NodeDigests.of_tree` finds it among
the split hooks or registers it, so an event recorder and a storage tier of one cache share
it.

Chains differ by their root seed (`None`, a salt's, or a namespace's: `page_hash.salt_seed`,
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

from typing import Protocol

from uniradix.page_hash import DIGEST_BYTES, chain_digests
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


class NodeDigests:
    """Page digests (`page_hash.chain_digests` blobs: 32 bytes per page, root side first) of
    the nodes of one tree, per chain seed. `bigram` hashes EAGLE bigram units."""

    def __init__(self, tree: TreeCore, bigram: bool = False) -> None:
        self.tree = tree
        self.page_size = tree.page_size
        self.bigram = bigram
        self._chains: dict[ChainId, dict[TreeNode, bytes]] = {}
        self._root = tree.root
        self._prune_at = _MIN_PRUNE
        self.pages_hashed = 0  # pages hashed since creation (a split or reuse hashes none)

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
        """`node`'s page digests in the chain rooted at `seed`; hashes what is not known
        yet. `node` must be in the tree."""
        chain_id = (seed, hasher)
        chain = self._chains.get(chain_id)
        if chain is None:
            chain = self._chains[chain_id] = {}
        blob = chain.get(node)
        if blob is not None:
            return blob
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
        prior = seed if at_root else chain[n][-DIGEST_BYTES:]
        for m in reversed(missing):
            if hasher is None:
                blob = chain_digests(m.key, self.page_size, prior, self.bigram)
            else:
                blob = hasher(m.key, self.page_size, prior, m.extra_key, at_root)
                at_root = False
            chain[m] = blob
            prior = blob[-DIGEST_BYTES:]
            self.pages_hashed += len(blob) // DIGEST_BYTES
        if len(chain) > self._prune_at:
            self._prune(chain)
        return chain[node]

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
        cut = split_len // self.page_size * DIGEST_BYTES
        for chain in self._chains.values():
            blob = chain.get(child)
            if blob is not None:
                chain[parent] = blob[:cut]
                chain[child] = blob[cut:]

    def _prune(self, chain: dict[TreeNode, bytes]) -> None:
        for n in [n for n in chain if n.parent is None]:
            del chain[n]
        self._prune_at = max(_MIN_PRUNE, 2 * len(chain))

    def __len__(self) -> int:
        """Nodes with digests, over all chains."""
        return sum(len(chain) for chain in self._chains.values())
