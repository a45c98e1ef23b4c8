"""NodeDigests: one table of page digests per tree, hashed once per node, kept across
splits, shared by the event recorder and the storage keys."""

from __future__ import annotations

import random
import threading

import pytest

from tests.helpers import insert_fresh, make_cache
from uniradix import EvictParams, RadixKey, native
from uniradix.events.recorder import EventRecorder
from uniradix.hashing.events import VllmCborHasher, vllm_none_hash
from uniradix.hashing.node_digests import NodeDigests, hash_cells
from uniradix.hashing.page import DIGEST_BYTES, chain_digests, page_digests, salt_seed
from uniradix.hashing.storage_keys import KeySpace
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


def test_cells_hash_when_read_and_split_unhashed_to_the_same_bytes() -> None:
    cache = make_cache(full_tokens=64, page_size=2)
    table = NodeDigests.of_tree(cache.tree)
    insert_fresh(cache, TOKENS)
    leaf = node_at(cache, TOKENS)
    whole = table.cell(leaf, None)
    assert table.pages_hashed == 0 and not whole.hashed  # naming pages hashes nothing
    insert_fresh(cache, [10, 20, 30, 40, 1, 2])  # splits the unhashed leaf after 2 pages
    upper = node_at(cache, [10, 20, 30, 40])
    assert table.pages_hashed == 0
    pages = page_digests(RadixKey(TOKENS).units, 2)
    assert table.node(leaf, None) == b"".join(pages[2:])  # chains from the new parent's cell
    assert table.node(upper, None) == b"".join(pages[:2])
    assert whole.blob() == b"".join(pages)  # the cell named before the split: the whole span
    assert whole.split(2, b"", b"") == (table.cell(upper, None), table.cell(leaf, None))
    with pytest.raises(AssertionError, match="split once"):
        whole.split(1, b"", b"")


def test_cells_read_on_several_threads_agree() -> None:
    cache = make_cache(full_tokens=4096, page_size=4)
    table = NodeDigests.of_tree(cache.tree)
    rng = random.Random(7)
    prefix: list[int] = []
    for _ in range(40):  # a deep chain of unhashed cells, each step branching off the last
        prefix = prefix + [rng.randrange(1 << 20) for _ in range(8)]
        insert_fresh(cache, prefix + [rng.randrange(1 << 20) for _ in range(8)])
    leaves = [n for n in cache.tree.nodes() if not n.children and n.num_tokens]
    cells = [table.cell(n, None) for n in leaves]
    assert table.pages_hashed == 0
    results: list[list[bytes]] = []

    def read() -> None:
        results.append([c.blob() for c in reversed(cells)])

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = []
    for leaf in reversed(leaves):
        keys, n = [], leaf
        while n.num_tokens:
            keys.append(n.key)
            n = n.parent
        whole = chain_digests(b"".join(reversed(keys)), 4)
        expected.append(whole[len(whole) - leaf.num_tokens // 4 * DIGEST_BYTES :])
    assert len(results) == 4 and all(got == expected for got in results)


def _path_digests(node: TreeNode, page_size: int, seed: bytes | None) -> bytes:
    """`node`'s digests hashed independently: its whole path, then its own pages."""
    keys, n = [], node
    while n.num_tokens:
        keys.append(n.key)
        n = n.parent  # type: ignore[assignment]
    whole = chain_digests(b"".join(reversed(keys)), page_size, seed)
    return whole[len(whole) - node.num_tokens // page_size * DIGEST_BYTES :]


@pytest.mark.parametrize("native_on", [True, False])
def test_hash_cells_hashes_a_forest_of_unhashed_cells_once(
    monkeypatch: pytest.MonkeyPatch, native_on: bool
) -> None:
    monkeypatch.setattr(native, "HAVE_NATIVE", native_on and native.BUILT)
    cache = make_cache(full_tokens=4096, page_size=4)
    table = NodeDigests.of_tree(cache.tree)
    rng = random.Random(11)
    prefixes: list[list[int]] = [[]]
    for _ in range(30):  # branches off earlier prompts at random depths
        base = rng.choice(prefixes)
        cut = rng.randrange(len(base) // 4 + 1) * 4  # whole pages
        prompt = base[:cut] + [rng.randrange(1 << 20) for _ in range(12)]
        insert_fresh(cache, prompt)
        prefixes.append(prompt)
    seed = salt_seed("t")
    nodes = [n for n in cache.tree.nodes() if n.num_tokens]
    cells = {n: table.cell(n, seed) for n in nodes}
    some = rng.sample(nodes, 5)
    for n in some:  # read already (by another thread, say): not hashed again
        cells[n].blob()
    before = table.pages_hashed
    leaves = [n for n in nodes if not n.children]
    hash_cells([cells[n] for n in leaves] + [cells[leaves[0]]])  # ancestors too, and twice
    assert all(c.hashed for c in cells.values())
    assert table.pages_hashed == sum(n.num_tokens // 4 for n in nodes)  # each page once
    assert table.pages_hashed > before
    for n, cell in cells.items():
        assert cell.blob() == _path_digests(n, 4, seed)


def test_hash_cells_with_another_chain_hash_and_hashed_cells() -> None:
    cache = make_cache(full_tokens=256, page_size=2)
    table = NodeDigests.of_tree(cache.tree)
    insert_fresh(cache, TOKENS)
    insert_fresh(cache, [10, 20, 30, 40, 1, 2])
    leaf = node_at(cache, TOKENS)
    hasher = VllmCborHasher()
    seed = vllm_none_hash("0")
    cell = table.cell(leaf, seed, hasher)
    hash_cells([cell, table.cell(leaf, None)])  # two chains: one per call
    want = hasher(RadixKey(TOKENS).units, 2, seed, None, True)
    assert cell.blob() == want[-2 * DIGEST_BYTES :]
    assert table.node(leaf, None) == chain_digests(RadixKey(TOKENS).units, 2)[-64:]
    hashed = table.pages_hashed
    hash_cells([cell])  # nothing left to hash
    assert table.pages_hashed == hashed
