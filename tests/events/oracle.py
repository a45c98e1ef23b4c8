"""Independent oracles for the event tests: a cache's full-KV content as published hashes
(each node hashed from the root in one go), and a strict checker of the stream's
invariants."""

from __future__ import annotations

from uniradix import UnifiedRadixCache
from uniradix.events import AllBlocksCleared, BlockRemoved, BlockStored
from uniradix.events.types import KVEvent
from uniradix.hashing.page import digest_to_int64, page_digests
from uniradix.tree.node import TreeNode


def _committed(node: TreeNode, medium: str) -> bool:
    """A device copy counts once its slots are in the tree, a host copy once its backup
    landed (a failed backup is dropped)."""
    d = node.data[0]
    if medium == "GPU":
        return d.value is not None
    return d.host_value is not None and (d.metadata is None or "write" not in d.metadata)


def cached_hashes(cache: UnifiedRadixCache, medium: str = "GPU") -> set[int]:
    out: set[int] = set()
    for node in cache.tree.nodes():
        if not _committed(node, medium):
            continue
        path = list(cache.tree.path_to_root(node))
        units = b"".join(n.key for n in reversed(path))
        digests = page_digests(units, cache.page_size, bigram=cache.settings.is_eagle)
        out.update(digest_to_int64(d) for d in digests[-(node.num_tokens // cache.page_size) :])
    return out


class StrictStream:
    """Applies events and fails on any that breaks the stream's contract, per medium: a
    store's parent is held (on the device for a device store; on some medium for a host
    store, as a write-back host copy's parent may be on the device only), its hashes are
    new on that medium and chain with its tokens; a removed hash is held there, and once
    it is on no medium no held block names it as parent."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.held: dict[str, dict[int, int | None]] = {}

    @property
    def parent(self) -> dict[int, int | None]:
        """The GPU blocks and their parents."""
        return self.held.get("GPU", {})

    def _anywhere(self, h: int) -> bool:
        return any(h in blocks for blocks in self.held.values())

    def apply(self, events: list[KVEvent]) -> None:
        for e in events:
            if isinstance(e, AllBlocksCleared):
                self.held.clear()
            elif isinstance(e, BlockStored):
                blocks = self.held.setdefault(e.medium or "GPU", {})
                parent = e.parent_block_hash
                assert parent is None or self._anywhere(parent), e
                # Device data is a prefix of every path: a device store's parent is there.
                assert parent is None or e.medium != "GPU" or parent in blocks, e
                assert len(e.token_ids) == len(e.block_hashes) * self.page_size, e
                prev = e.parent_block_hash
                for h in e.block_hashes:
                    assert h not in blocks, f"{h} stored twice on {e.medium}"
                    blocks[h] = prev
                    prev = h
            elif isinstance(e, BlockRemoved):
                blocks = self.held.get(e.medium or "GPU", {})
                for h in e.block_hashes:
                    assert h in blocks, f"removed {h} is not held on {e.medium}"
                    del blocks[h]
                    if not self._anywhere(h):
                        assert all(h not in b.values() for b in self.held.values()), (
                            f"removed {h} before its child"
                        )
