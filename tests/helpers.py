"""Small builders shared by the tests: a cache, and inserting keys with real slots."""

from __future__ import annotations

import torch

from uniradix import CacheConfig, InsertParams, RadixKey, UnifiedRadixCache, build_cache
from uniradix.types import InsertResult


def make_cache(full_tokens: int = 64, page_size: int = 1, **kwargs: object) -> UnifiedRadixCache:
    return build_cache(
        CacheConfig.of(full_tokens=full_tokens, page_size=page_size, max_context_len=256, **kwargs)  # type: ignore[arg-type]
    )


def alloc(cache: UnifiedRadixCache, num_tokens: int) -> torch.Tensor:
    slots = cache.pools.kv_allocator.alloc(num_tokens)
    assert slots is not None, f"pool too small for {num_tokens}"
    return slots


def insert_fresh(
    cache: UnifiedRadixCache, tokens: list[int], extra_key: str | None = None
) -> tuple[InsertResult, torch.Tensor]:
    """Inserts `tokens` with freshly allocated slots; returns the result and the slots."""
    slots = alloc(cache, len(tokens))
    result = cache.insert(InsertParams(RadixKey(tokens, extra_key), slots))
    return result, slots


def tree_shape(cache: UnifiedRadixCache) -> list[tuple[int, list[int], list[int]]]:
    """(depth, key units, full slots) of every node, depth-first in child-key order."""
    out: list[tuple[int, list[int], list[int]]] = []

    def visit(node, depth):  # type: ignore[no-untyped-def]
        for child in sorted(node.children.values(), key=lambda n: n.key):
            value = child.data[0].value
            out.append(
                (depth, RadixKey.from_units(child.key, None, False).tolist(), value.tolist())
            )
            visit(child, depth + 1)

    visit(cache.tree.root, 0)
    return out
