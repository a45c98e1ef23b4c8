"""The token allocator's free on the native path and on the numpy path: the same pages pushed
in the same order (so every later allocation is the same), the same errors with the same
messages, and nothing changed by a refused free."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers import alloc, make_cache
from uniradix import InsertParams, RadixKey, native
from uniradix.memory.allocator import TokenSlotAllocator

pytestmark = pytest.mark.usefixtures("python_and_native")  # every test on both paths


def _state(a: TokenSlotAllocator) -> tuple[list[int], list[bool]]:
    return a._stack[: a._top].tolist(), a._in_use.tolist()


def _page_slots(pages: np.ndarray, page_size: int) -> np.ndarray:
    return (pages[:, None] * page_size + np.arange(page_size)).reshape(-1)


def _shaped_free(rng: np.random.Generator, held: np.ndarray, page_size: int) -> np.ndarray:
    """Some of `held`'s pages (distinct, allocated) as slots, in a shape a caller frees:
    runs as allocated, reversed, shuffled, interleaved runs; at page size > 1 also partial
    pages and slots of one page repeated."""
    k = int(rng.integers(1, held.size + 1))
    start = int(rng.integers(0, held.size - k + 1))
    pages = held[start : start + k].copy()
    shape = int(rng.integers(0, 4))
    if shape == 1:
        pages = pages[::-1].copy()
    elif shape == 2:
        rng.shuffle(pages)
    elif shape == 3:
        pages = np.concatenate([pages[::2], pages[1::2]])
    slots = _page_slots(pages, page_size)
    if page_size > 1 and rng.random() < 0.5:
        keep = rng.random(slots.size) < 0.6
        keep[::page_size] = True  # at least one slot of every page
        slots = slots[keep]
        slots = np.concatenate([slots, slots[: int(rng.integers(0, slots.size))]])
    return slots


@pytest.mark.parametrize("page_size", [1, 4])
def test_random_frees_leave_the_same_stack_on_both_paths(
    monkeypatch: pytest.MonkeyPatch, python_and_native: str, page_size: int
) -> None:
    """One random sequence of allocations and frees, replayed on the other path: the free
    stack, the flags and every allocation are equal after every step."""
    traces = {}
    for path in ("python", "native") if native.BUILT else ("python",):
        monkeypatch.setattr(native, "HAVE_NATIVE", path == "native")
        rng = np.random.default_rng(7)
        a = TokenSlotAllocator(64 * page_size, page_size)
        held: list[np.ndarray] = []
        trace = []
        for _ in range(400):
            if held and rng.random() < 0.5:
                pages = held.pop(int(rng.integers(0, len(held))))
                slots = _shaped_free(rng, pages, page_size)
                a.free(slots, node_value=False)
                freed = np.unique(slots // page_size)
                rest = np.setdiff1d(pages, freed)
                if rest.size:
                    held.append(rest)
            else:
                got = a.alloc_host(int(rng.integers(1, 9)) * page_size)
                if got is not None:
                    held.append(got[::page_size] // page_size)
                trace.append(None if got is None else got.tolist())
            trace.append(_state(a))
        for pages in held:
            a.free(torch.from_numpy(_page_slots(pages, page_size)))
        assert a.available_size() == a.capacity
        traces[path] = trace
    assert len(set(map(repr, traces.values()))) == 1


@pytest.mark.parametrize("page_size", [1, 4])
def test_node_value_frees_push_in_the_given_order(page_size: int) -> None:
    a = TokenSlotAllocator(16 * page_size, page_size)
    slots = a.alloc_host(6 * page_size)
    assert slots is not None
    order = np.array([3, 1, 6, 2], dtype=np.int64)
    a.free(_page_slots(order, page_size), node_value=True)
    assert a._stack[a._top - 4 : a._top].tolist() == order[::-1].tolist()
    assert a.alloc(4 * page_size)[::page_size].tolist() == (order * page_size).tolist()


def _refused(a: TokenSlotAllocator, slots: torch.Tensor | np.ndarray, match: str) -> str:
    """Frees `slots`, expecting a ValueError matching `match` and no change to `a`."""
    before = _state(a)
    with pytest.raises(ValueError, match=match) as error:
        a.free(slots)
    assert _state(a) == before
    return str(error.value)


@pytest.mark.parametrize("page_size", [1, 4])
def test_bad_frees_raise_the_same_errors_and_change_nothing(
    monkeypatch: pytest.MonkeyPatch, page_size: int
) -> None:
    messages = {}
    for path in ("python", "native") if native.BUILT else ("python",):
        monkeypatch.setattr(native, "HAVE_NATIVE", path == "native")
        a = TokenSlotAllocator(8 * page_size, page_size)
        held = a.alloc_host(5 * page_size)
        assert held is not None
        a.free(held[-page_size:])  # page 5 is free again: freeing it twice is refused
        ps = page_size
        msgs = [
            _refused(a, np.concatenate([held[:ps], held[-ps:]]), "not allocated"),
            _refused(a, torch.tensor([7 * ps, ps]), "not allocated"),  # never allocated
            _refused(a, np.array([ps, 0]), "outside"),  # the reserved page
            _refused(a, np.array([ps, 9 * ps]), "outside"),  # past the pool
            _refused(a, np.array([-1, ps]), "outside"),
        ]
        if page_size == 1:
            msgs.append(_refused(a, np.array([1, 2, 3, 2]), "duplicate"))
        messages[path] = msgs
        # A page named by several of its slots, at page size > 1, is freed once.
        repeat = held[:1] if page_size > 1 else held[:0]
        a.free(np.concatenate([held[:ps], repeat, held[ps : 2 * ps][::-1]]))
        in_use = a.is_allocated(held).tolist()
        assert in_use == [False] * (2 * ps) + [True] * (2 * ps) + [False] * ps
        with pytest.raises(TypeError):
            a.free([1])  # type: ignore[arg-type]
    assert len(set(map(repr, messages.values()))) == 1


def test_strided_and_int32_slots(page_size: int = 2) -> None:
    a = TokenSlotAllocator(32, page_size)
    slots = a.alloc_host(16)
    assert slots is not None
    a.free(slots[::4])  # every other page, one slot each
    assert a.available_size() == 16 + 8
    a.free(torch.from_numpy(slots[2::4]).to(torch.int32))
    assert a.available_size() == 32


def test_native_refuses_a_node_value_naming_a_page_twice(python_and_native: str) -> None:
    """A node value's pages are distinct by contract. The native free checks it (a page
    pushed twice would be handed out twice) and changes nothing; the numpy path trusts it."""
    if python_and_native != "native":
        pytest.skip("the numpy path trusts a node value")
    a = TokenSlotAllocator(8)
    a.alloc_host(4)
    before = _state(a)
    with pytest.raises(ValueError, match="page 2 given twice"):
        a.free(np.array([1, 2, 3, 2]), node_value=True)
    assert _state(a) == before


def test_native_wrapper_refuses_bad_buffers(python_and_native: str) -> None:
    if python_and_native != "native":
        pytest.skip("native only")
    a = TokenSlotAllocator(8)
    a.alloc_host(4)
    slots = np.array([1], dtype=np.int64)
    with pytest.raises(ValueError, match="bool"):
        native.free_slots(slots, 1, a._in_use.astype(np.uint8), a._stack, a._top, False)
    with pytest.raises(ValueError, match="int64"):
        native.free_slots(slots.astype(np.int32), 1, a._in_use, a._stack, a._top, False)
    with pytest.raises(ValueError, match="flags for a stack"):
        native.free_slots(slots, 1, a._in_use[:-1], a._stack, a._top, False)
    with pytest.raises(ValueError, match="flags for a stack"):
        native.free_slots(slots, 1, a._in_use, a._stack, 9, False)
    with pytest.raises(ValueError, match="page_size"):
        native.free_slots(slots, 0, a._in_use, a._stack, a._top, False)
    assert _state(a)[0] == a._stack[: a._top].tolist() and a.available_size() == 4


@pytest.mark.parametrize("page_size", [1, 4])
def test_duplicate_frees_of_inserts_are_the_same_on_both_paths(
    monkeypatch: pytest.MonkeyPatch, page_size: int
) -> None:
    """Inserts of cached keys through the public API: the caller's duplicate slots go back
    to the pool, the tree's own slots handed back stay, and the free stack ends equal on
    both paths (the tree's own found by the native comparison as by numpy's)."""
    stacks = {}
    for path in ("python", "native") if native.BUILT else ("python",):
        monkeypatch.setattr(native, "HAVE_NATIVE", path == "native")
        cache = make_cache(full_tokens=64 * page_size, page_size=page_size)
        allocator = cache.pools.kv_allocator
        tokens = list(range(10, 10 + 6 * page_size))
        first = alloc(cache, len(tokens))
        cache.insert(InsertParams(RadixKey(tokens), first))
        again = alloc(cache, len(tokens))  # all duplicates: freed
        assert cache.insert(InsertParams(RadixKey(tokens), again)).prefix_len == len(tokens)
        assert not allocator.is_allocated(again).any()
        # The tree's own first two pages handed back, then duplicates: only those are freed.
        longer = tokens + list(range(500, 500 + page_size))
        mixed = torch.cat([first[: 2 * page_size], alloc(cache, len(longer) - 2 * page_size)])
        cache.insert(InsertParams(RadixKey(longer), mixed))
        assert allocator.is_allocated(first).all()
        assert not allocator.is_allocated(mixed[2 * page_size : len(tokens)]).any()
        cache.check_invariants({"full": 0})
        stacks[path] = _state(allocator)
    assert len(set(map(repr, stacks.values()))) == 1


def test_native_count_equal(python_and_native: str) -> None:
    if python_and_native != "native":
        pytest.skip("native only")
    a = np.arange(10, dtype=np.int64)
    b = np.where(a % 3 == 0, a, -a)
    assert native.count_equal(a, b) == 4
    assert native.count_equal(a[::2], b[::2]) == np.count_nonzero(a[::2] == b[::2])
    assert native.count_equal(a[::-1], a[::-1]) == 10
    with pytest.raises(ValueError, match="one length"):
        native.count_equal(a, b[1:])
    with pytest.raises(ValueError, match="int64"):
        native.count_equal(a.astype(np.int32), b.astype(np.int32))
