"""`TreeCore.insert`'s `leaf_tail`: a new leaf built as two nodes leaves the tree exactly as a
one-node leaf split at once would (ids, keys, times, priority, hit counts, shape, evictable
leaves), and only when the leaf starts at `tail_from` or later and is longer than the tail."""

from __future__ import annotations

from typing import Any

import pytest

from uniradix.key import RadixKey
from uniradix.tree.core import TreeCore
from uniradix.tree.policy import eviction_policy

PRIOR = ([1, 2, 3, 4, 5, 6], [1, 2, 9, 9], [7, 7])


def snapshot(tree: TreeCore) -> dict[str, Any]:
    nodes = {}
    for n in tree.nodes():
        assert n.parent is not None
        nodes[n.id] = (
            n.key,
            n.extra_key,
            n.num_tokens,
            n.parent.id,
            sorted((repr(k), c.id) for k, c in n.children.items()),
            n.last_access_time,
            n.creation_time,
            n.priority,
            n.hit_count,
        )
    return {
        "nodes": nodes,
        "root": sorted((repr(k), c.id) for k, c in tree.root.children.items()),
        "time": tree._time,
        "next_id": tree._next_id,
        "leaves": sorted(n.id for n in tree.leaves.members),
    }


def grown_tree(page_size: int, ns: str | None) -> TreeCore:
    tree = TreeCore(1, page_size, eviction_policy("lru"))
    for tokens in PRIOR:
        leaf, _, is_new = tree.insert(RadixKey(tokens, ns), len(tokens), None)
        if is_new:
            tree.leaves.add(leaf)
    return tree


@pytest.mark.parametrize(
    ("page_size", "ns", "tokens", "tail"),
    [
        (1, None, [1, 2, 3, 4, 5, 6, 10, 11, 12, 13, 14], 2),  # under an inner node's child
        (1, "lora", [1, 2, 3, 8, 8, 8, 8], 3),  # a split on the walk, then a namespaced leaf
        (2, None, [5, 5, 6, 6, 7, 7, 8, 8], 4),  # under the root, whole pages
    ],
)
def test_tailed_leaf_is_the_split_leaf(
    page_size: int, ns: str | None, tokens: list[int], tail: int
) -> None:
    tailed, split = grown_tree(page_size, ns), grown_tree(page_size, ns)
    key = RadixKey(tokens, ns)
    leaf, present, is_new = tailed.insert(key, len(tokens), None, 0, 3, leaf_tail=tail)
    whole, present_split, _ = split.insert(key, len(tokens), None, 0, 3)
    split.split(whole, whole.num_tokens - tail)
    assert is_new and (present, leaf.id) == (present_split, whole.id)
    assert leaf.num_tokens == tail and leaf.parent is not None and leaf.parent.id == whole.id + 1
    assert snapshot(tailed) == snapshot(split)


@pytest.mark.parametrize(
    ("tail", "tail_from"),
    [(8, 0), (6, 0), (2, 4)],  # longer than the leaf, as long as it, past the leaf's start
)
def test_leaf_stays_one_node_outside_the_tail_rule(tail: int, tail_from: int) -> None:
    tailed, plain = grown_tree(1, None), grown_tree(1, None)
    tokens = [1, 2, 3, 20, 21, 22, 23, 24, 25]  # a new leaf of 6 tokens starting at 3
    leaf, present, _ = tailed.insert(
        RadixKey(tokens), len(tokens), None, leaf_tail=tail, tail_from=tail_from
    )
    plain.insert(RadixKey(tokens), len(tokens), None)
    assert present == 3 and leaf.num_tokens == 6
    assert snapshot(tailed) == snapshot(plain)
