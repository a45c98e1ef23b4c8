"""The match walk (`uniradix.tree.walk`): the native walk and its pure-Python twin find the
same nodes, offset and diverging child on random trees, from a key's bytes or from an
engine's `array('q')`; and a match or an insert given the array (`TreeCore.match` and
`insert` with the units alone) leaves the tree exactly as one given the key's `RadixKey` does."""

from __future__ import annotations

import random
from array import array
from typing import Any

import pytest

from tests.tree.test_tailed_leaf import snapshot
from uniradix import native
from uniradix.key import UNIT_BYTES, RadixKey
from uniradix.tree import walk
from uniradix.tree.core import OverlapHook, TreeCore
from uniradix.tree.policy import eviction_policy

needs_native = pytest.mark.skipif(not native.BUILT, reason="uniradix._native was not built")
NAMESPACES = (None, "lora-a")


def random_keys(rng: random.Random, count: int, page_size: int) -> list[tuple[list[int], Any]]:
    """Keys sharing prefixes (a few roots, branches, extensions), some in a namespace."""
    keys: list[tuple[list[int], Any]] = []
    for _ in range(count):
        if keys and rng.random() < 0.7:
            base, ns = rng.choice(keys)
            cut = rng.randrange(len(base) + 1)
            tokens = base[:cut] + [rng.randrange(4) for _ in range(rng.randrange(1, 12))]
        else:
            tokens, ns = (
                [rng.randrange(4) for _ in range(rng.randrange(1, 20))],
                rng.choice(NAMESPACES),
            )
        keys.append((tokens[: len(tokens) - len(tokens) % page_size] or [0] * page_size, ns))
    return keys


def built_tree(seed: int, page_size: int) -> tuple[TreeCore, list[tuple[list[int], Any]]]:
    rng = random.Random(seed)
    tree = TreeCore(1, page_size, eviction_policy("lru"))
    keys = random_keys(rng, 40, page_size)
    for tokens, ns in keys[:25]:  # the rest: probes the tree may not hold
        tree.insert(RadixKey(tokens, ns), len(tokens), None)
    return tree, keys


def both_walks(tree: TreeCore, tokens: list[int], ns: Any, limit: int) -> list[walk.Walk]:
    units = RadixKey(tokens).units
    num_bytes = limit * UNIT_BYTES
    page_bytes = tree.page_size * UNIT_BYTES
    walks = [walk.walk_edges(tree.root, units, num_bytes, page_bytes, ns)]
    if native.BUILT:
        for buffer in (units, array("q", tokens)):
            walks.append(native.walk_edges(tree.root, buffer, num_bytes, page_bytes, ns))
    return walks


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("seed", range(6))
def test_native_and_python_walks_agree(seed: int, page_size: int) -> None:
    tree, keys = built_tree(seed, page_size)
    found = diverged = 0
    for tokens, ns in keys:
        for limit in {len(tokens), len(tokens) - len(tokens) % (2 * page_size)}:
            first, *others = both_walks(tree, tokens, ns, limit)
            path, offset, child = first
            for other in others:
                assert other[0] == path and all(a is b for a, b in zip(other[0], path, strict=True))
                assert other[1] == offset and other[2] is child
            found += bool(path)
            diverged += child is not None
            assert offset == sum(len(n.key) for n in path) <= limit * UNIT_BYTES
    assert found and diverged  # the probes met both cases


@needs_native
def test_native_walk_rejects_a_length_past_the_buffer() -> None:
    tree, _ = built_tree(0, 1)
    with pytest.raises(ValueError, match="num_bytes 80"):
        native.walk_edges(tree.root, b"\0" * 64, 80, 8, None)
    with pytest.raises(ValueError, match="page_bytes 0"):
        native.walk_edges(tree.root, b"\0" * 64, 64, 0, None)
    with pytest.raises(TypeError):
        native.walk_edges(tree.root, "not a buffer", 0, 8, None)


def recorder(calls: list[tuple[int, int, int]]) -> OverlapHook:
    return lambda node, at, units: calls.append((node.id, at, units))


@pytest.mark.parametrize("use_native", [True, False])
@pytest.mark.parametrize("page_size", [1, 4])
def test_units_from_an_array_leave_the_tree_as_a_key_does(
    page_size: int, use_native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if use_native and not native.BUILT:
        pytest.skip("uniradix._native was not built")
    monkeypatch.setattr(native, "HAVE_NATIVE", use_native)
    by_key, keys = built_tree(3, page_size)
    by_units, _ = built_tree(3, page_size)
    rng = random.Random(7)
    for step in range(60):
        tokens, ns = rng.choice(keys)
        num_units = len(tokens)
        if step % 2:
            want = by_key.match(RadixKey(tokens, ns), num_units, ())
            got = by_units.match(array("q", tokens), num_units, (), extra_key=ns)
            assert [n.id for n in got.path] == [n.id for n in want.path]
            assert got[1:] == want[1:]
        else:
            want_hooks: list[tuple[int, int, int]] = []
            got_hooks: list[tuple[int, int, int]] = []
            want_ins = by_key.insert(RadixKey(tokens, ns), num_units, recorder(want_hooks))
            got_ins = by_units.insert(
                array("q", tokens), num_units, recorder(got_hooks), extra_key=ns
            )
            assert (got_ins[0].id, *got_ins[1:]) == (want_ins[0].id, *want_ins[1:])
            assert got_hooks == want_hooks
        assert snapshot(by_units) == snapshot(by_key)
