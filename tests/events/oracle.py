"""Independent oracles for the event tests: a cache's full-KV content as published hashes
(each node hashed from the root in one go), and a strict checker of the stream's
invariants."""

from __future__ import annotations

from uniradix import UnifiedRadixCache
from uniradix.events import AllBlocksCleared, BlockRemoved, BlockStored
from uniradix.events.types import KVEvent
from uniradix.page_hash import digest_to_int64, page_digests


def cached_hashes(cache: UnifiedRadixCache) -> set[int]:
    out: set[int] = set()
    for node in cache.tree.nodes():
        if node.data[0].value is None:
            continue
        path = list(cache.tree.path_to_root(node))
        units = b"".join(n.key for n in reversed(path))
        digests = page_digests(units, cache.page_size)
        out.update(digest_to_int64(d) for d in digests[-(node.num_tokens // cache.page_size) :])
    return out


class StrictStream:
    """Applies events and fails on any that breaks the stream's contract: a store's parent
    is held, its hashes are new and chain with its tokens; a removed hash is held and has
    no held child (deepest first)."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.parent: dict[int, int | None] = {}

    def apply(self, events: list[KVEvent]) -> None:
        for e in events:
            if isinstance(e, AllBlocksCleared):
                self.parent.clear()
            elif isinstance(e, BlockStored):
                assert e.parent_block_hash is None or e.parent_block_hash in self.parent, e
                assert len(e.token_ids) == len(e.block_hashes) * self.page_size, e
                prev = e.parent_block_hash
                for h in e.block_hashes:
                    assert h not in self.parent, f"{h} stored twice"
                    self.parent[h] = prev
                    prev = h
            elif isinstance(e, BlockRemoved):
                for h in e.block_hashes:
                    assert h in self.parent, f"removed {h} is not held"
                    del self.parent[h]
                    assert h not in self.parent.values(), f"removed {h} before its child"
