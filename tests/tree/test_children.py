"""Childless nodes share one empty, unchangeable children dict; a node gets its own dict with
its first child and gives it up with its last, and the tree's shape is what it was."""

import pytest

from tests.helpers import insert_fresh, make_cache
from uniradix import EvictParams, MatchPrefixParams, RadixKey
from uniradix.tree.node import NO_CHILDREN


def match_len(cache, tokens):
    return cache.match_prefix(MatchPrefixParams(RadixKey(tokens))).device_prefix_len


def test_leaves_share_the_empty_children_and_it_refuses_to_change():
    cache = make_cache()
    insert_fresh(cache, [1, 2, 3])
    insert_fresh(cache, [7, 8])
    leaves = [n for n in cache.tree.nodes() if not n.children]
    assert len(leaves) == 2 and all(n.children is NO_CHILDREN for n in leaves)
    for change in (
        lambda d: d.__setitem__(b"x", None),
        lambda d: d.setdefault(b"x", None),
        lambda d: d.update({b"x": None}),
        lambda d: d.pop(b"x", None),
        lambda d: d.clear(),
    ):
        with pytest.raises(TypeError):
            change(NO_CHILDREN)
    assert len(NO_CHILDREN) == 0
    cache.check_invariants({"full": 0})


def test_first_child_gives_a_node_its_own_dict_and_the_last_takes_it_back():
    cache = make_cache(full_tokens=16)
    insert_fresh(cache, [1, 2, 3])
    insert_fresh(cache, [1, 2, 3, 4, 5])  # extends the leaf: it gains a child
    parent = next(n for n in cache.tree.nodes() if n.num_tokens == 3)
    assert parent.children is not NO_CHILDREN and len(parent.children) == 1
    insert_fresh(cache, [1, 2, 9])  # splits [1, 2, 3]: the new node gets a dict of its own
    top = next(n for n in cache.tree.nodes() if n.num_tokens == 2)
    assert top.children is not NO_CHILDREN and len(top.children) == 2
    assert match_len(cache, [1, 2, 3, 4, 5]) == 5 and match_len(cache, [1, 2, 9]) == 3
    cache.evict(EvictParams(num_tokens=2))  # the leaves [4, 5] and [9]
    assert match_len(cache, [1, 2, 3, 4, 5]) == 3
    assert parent.children is NO_CHILDREN  # its last child left
    cache.check_invariants({"full": 0})
    cache.evict(EvictParams(num_tokens=3))
    assert cache.tree.root.children is NO_CHILDREN
    insert_fresh(cache, [5, 6])  # the root gets a dict again
    assert match_len(cache, [5, 6]) == 2
    cache.check_invariants({"full": 0})
