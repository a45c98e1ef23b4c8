"""KV cache events and L3 storage page hashes of the uniradix TreeCore, in SGLang's own format.

SGLang's `KVCacheEventRecorder` builds `BlockStored` / `BlockRemoved` from a node's key, its
page hashes and its parent's; `EventNodes` keeps, beside each uniradix node, the view the
recorder reads (an `EventNode`), so the events, hashes and their chaining are SGLang's own,
identical to its Python core's on the same calls. The same page hashes key SGLang's L3
storage (one field in SGLang's node too): with `hashing` on, a new node is hashed when it is
stored, as SGLang's core does with storage on. Kept only when events or storage are enabled.
"""

from __future__ import annotations

from array import array
from typing import Any

from sglang.srt.disaggregation.kv_events import StorageMedium
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.utils import compute_node_hash_values, split_node_hash_value

from uniradix.tree.node import TreeNode


class EventNode:
    """What the recorder reads of a node: its SGLang key, page hashes and parent."""

    __slots__ = ("event_hash_value", "hash_value", "key", "parent")

    def __init__(self, key: Any, parent: EventNode | None) -> None:
        self.key = key
        self.parent = parent
        self.hash_value: list[str] | None = None if parent is not None else []
        self.event_hash_value: list[str] | None = None


class EventNodes:
    def __init__(self, recorder: Any, page_size: int, root_id: int) -> None:
        self.recorder = recorder
        self.page_size = page_size
        self.hashing = False  # L3 storage on: hash every new node when it is stored
        self.views: dict[int, EventNode] = {root_id: EventNode(RadixKey(array("q")), None)}

    def stored(
        self,
        node: TreeNode,
        sglang_key: Any,
        start: int,
        session: Any,
        medium: Any = None,
        hashes: list[str] | None = None,
    ) -> None:
        """A new leaf holding tokens `start:` (its own) of `sglang_key`'s whole pages;
        `hashes`: its page hashes as L3 storage gave them (a prefetched host path)."""
        assert node.parent is not None
        tokens = array("q", sglang_key.raw_token_ids()[start : start + node.num_tokens])
        key = RadixKey(tokens, sglang_key.extra_key, cache_salt=sglang_key.cache_salt)
        self.adopt(node, key, hashes)
        self.recorder.record_store(self.views[node.id], medium, session_id=session)

    def stored_tailed(
        self, upper: TreeNode, leaf: TreeNode, sglang_key: Any, start: int, session: Any
    ) -> None:
        """A new leaf the tree built as two nodes (`TreeCore.insert`'s `leaf_tail`): stored
        as the one node it stands for, then split, as a core that caps a new leaf by a split
        records it, so the events match."""
        assert upper.parent is not None
        stop = start + upper.num_tokens + leaf.num_tokens
        tokens = array("q", sglang_key.raw_token_ids()[start:stop])
        key = RadixKey(tokens, sglang_key.extra_key, cache_salt=sglang_key.cache_salt)
        view = self.views[leaf.id] = self._new_view(upper.parent, key, None)
        self.recorder.record_store(view, None, session_id=session)
        self.split(upper, leaf, upper.num_tokens)

    def adopt(self, node: TreeNode, key: Any, hashes: list[str] | None = None) -> None:
        """Gives `node` (its parent has a view) a view of SGLang key `key`, unrecorded."""
        assert node.parent is not None
        self.views[node.id] = self._new_view(node.parent, key, hashes)

    def _new_view(self, parent: TreeNode, key: Any, hashes: list[str] | None) -> EventNode:
        view = EventNode(key, self.views[parent.id])
        if hashes is not None:
            view.hash_value = hashes
        elif self.hashing:
            view.hash_value = compute_node_hash_values(view, self.page_size)
        return view

    def restored(self, node: TreeNode, medium: Any, session: Any = None) -> None:
        """A node already in the tree gained a copy on `medium` (host tier: a backup, a
        load-back, a device value rebuilt by an insert)."""
        self.recorder.record_store(self.views[node.id], medium, session_id=session)

    def split(self, parent: TreeNode, child: TreeNode, split_len: int) -> None:
        old = self.views[child.id]
        new = EventNode(old.key[:split_len], old.parent)
        new.hash_value, old.hash_value = split_node_hash_value(
            old.hash_value, split_len, self.page_size
        )
        new.event_hash_value, old.event_hash_value = split_node_hash_value(
            old.event_hash_value, split_len, self.page_size
        )
        old.key, old.parent = old.key[split_len:], new
        self.views[parent.id] = new

    def removed(self, node: TreeNode, medium: Any = StorageMedium.GPU, drop: bool = True) -> None:
        """`node` lost its copy on `medium`; `drop`: it leaves the tree too (with a host tier
        a node that leaves the device may stay, host-only)."""
        view = self.views.pop(node.id) if drop else self.views[node.id]
        self.recorder.record_remove(view, medium=medium)

    def forget(self, node: TreeNode) -> None:
        """`node` left the tree holding no copy (no event: nothing was removed)."""
        self.views.pop(node.id, None)
