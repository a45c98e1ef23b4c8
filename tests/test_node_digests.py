"""NodeDigests: one table of page digests per tree, hashed once per node, kept across
splits, shared by the event recorder and the storage keys."""

from __future__ import annotations

import pytest

from tests.helpers import insert_fresh, make_cache
from uniradix import EvictParams, RadixKey
from uniradix.events.recorder import EventRecorder
from uniradix.node_digests import NodeDigests
from uniradix.page_hash import DIGEST_BYTES, chain_digests, page_digests, salt_seed
from uniradix.storage.keys import KeySpace
from uniradix.tree.node import TreeNode

TOKENS = [10, 20, 30, 40, 50, 60, 70, 80]


def node_at(cache, tokens: list[int]) -> TreeNode:  # type: ignore[no-untyped-def]
    """The node whose edge ends after `tokens`."""
    node, units = cache.tree.root, RadixKey(tokens).units
    while units:
        node = next(c for c in node.children.values() if units.startswith(c.key))
        units = units[len(node.key) :]
    return node


def test_digests_follow_the_chain_and_splits_rehash_nothing() -> None:
    cache = make_cache(full_tokens=64, page_size=2)
    table = NodeDigests.of_tree(cache.tree)
    insert_fresh(cache, TOKENS)
    leaf = node_at(cache, TOKENS)
    assert table.node(leaf, None) == chain_digests(RadixKey(TOKENS).units, 2)
    assert table.pages_hashed == 4
    insert_fresh(cache, [10, 20, 30, 40, 1, 2])  # splits the leaf after 4 tokens
    upper = node_at(cache, [10, 20, 30, 40])
    assert leaf.parent is upper and upper.num_tokens == 4
    whole = page_digests(RadixKey(TOKENS).units, 2)
    assert table.node(upper, None) == b"".join(whole[:2])
    assert table.node(leaf, None) == b"".join(whole[2:])
    branch = node_at(cache, [10, 20, 30, 40, 1, 2])
    assert table.node(branch, None) == page_digests(RadixKey([10, 20, 30, 40, 1, 2]).units, 2)[2]
    assert table.pages_hashed == 5  # only the new branch's page
    assert table.path(leaf, None) == chain_digests(RadixKey(TOKENS).units, 2)
    assert table.last(cache.tree.root, None) is None


def test_chains_are_kept_per_seed() -> None:
    cache = make_cache(full_tokens=64, page_size=2)
    table = NodeDigests.of_tree(cache.tree)
    insert_fresh(cache, TOKENS)
    leaf = node_at(cache, TOKENS)
    seed = salt_seed("s")
    assert table.node(leaf, seed) == chain_digests(RadixKey(TOKENS).units, 2, seed)
    assert table.node(leaf, seed) != table.node(leaf, None)
    assert len(table) == 2


def test_recorder_and_storage_keys_share_one_table() -> None:
    cache = make_cache(full_tokens=64, page_size=2)
    recorder = EventRecorder(cache)
    cache.set_event_sink(recorder)
    table = NodeDigests.of_tree(cache.tree)
    assert recorder.digests is table
    assert cache.tree.split_hooks.count(table) == 1
    insert_fresh(cache, TOKENS)
    recorder.take_events()
    hashed = table.pages_hashed
    leaf = node_at(cache, TOKENS)
    keyspace = KeySpace("model@rev", "bfloat16", "layer_first", 2, "full")
    path = table.path(leaf, None)  # what the storage tier's backup needs: no rehash
    assert table.pages_hashed == hashed == 4
    from_table = keyspace.keys(
        [path[a : a + DIGEST_BYTES] for a in range(0, len(path), DIGEST_BYTES)]
    )
    assert from_table == keyspace.keys_for(RadixKey(TOKENS))


def test_forget_reset_and_misuse() -> None:
    cache = make_cache(full_tokens=64, page_size=2)
    table = NodeDigests.of_tree(cache.tree)
    insert_fresh(cache, TOKENS)
    leaf = node_at(cache, TOKENS)
    table.node(leaf, None)
    table.forget(leaf)
    assert len(table) == 0
    table.node(leaf, None)
    cache.evict(EvictParams(num_tokens=64))
    assert leaf.parent is None
    table.forget(leaf)
    with pytest.raises(ValueError, match="not in the tree"):
        table.node(leaf, None)
    cache.reset()
    insert_fresh(cache, [1, 2])
    table.node(node_at(cache, [1, 2]), None)
    assert len(table) == 1  # the old tree's entries went with the reset
    with pytest.raises(ValueError, match="bigram"):
        NodeDigests.of_tree(cache.tree, bigram=True)
