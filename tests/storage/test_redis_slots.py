"""A batch grouped by master and slot: every position once, each group in batch order and in
one slot of one master, whichever way the batch is grouped (a loop for short batches, a step
per run of a chain's pages, a sort for batches of many short runs)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from redis.exceptions import SlotNotCoveredError

from uniradix import native
from uniradix.key import RadixKey
from uniradix.storage import KeySpace
from uniradix.storage.redis_slots import SLOTS, group_by_master, key_slot
from uniradix.storage.redis_wire import NameBlock, key_commands, multi_key_command


def _owner(masters: int, seed: int) -> tuple[np.ndarray, list[int]]:
    rng = random.Random(seed)
    owner_list = [rng.randrange(masters) for _ in range(SLOTS)]
    return np.array(owner_list, dtype=np.int64), owner_list


def _batches() -> list[list[bytes]]:
    chained = KeySpace("org/m@rev1", "bfloat16", "layer_first", 1, "full", group_pages=64)
    per_page = KeySpace("org/m@rev1", "bfloat16", "layer_first", 1, "full", group_pages=1)
    out = []
    for space in (chained, per_page):
        for n in (64, 255, 256, 1024):
            out.append([k.name.encode() for k in space.keys_for(RadixKey(list(range(n))))])
    out.append([b"plain.%d" % i for i in range(600)])  # no hash tags at all
    out.append([b"k%d.{t}" % i for i in range(10)])  # one tag
    out.append([b"{x%d}k.{t}" % (i % 3) for i in range(10)])  # the first tag counts
    out.append([b"k%d.{t}" % i for i in range(9)] + [b"k.{}"])  # an empty tag: the whole name
    out.append([b"%04d}.{t%d}" % (i, i // 64) for i in range(600)])  # a `}` before the tag
    out.append([b"k%d.{t%d}" % (i, i // 64) for i in range(600)])  # tags, names of 2 lengths
    return out


@pytest.mark.parametrize("by_slot", [True, False])
@pytest.mark.parametrize("batch", _batches(), ids=lambda b: f"{len(b)}-{b[0][:6]!r}")
def test_groups_cover_the_batch_in_order_one_master_each(
    batch: list[bytes], by_slot: bool, python_and_native: str
) -> None:
    owner, owner_list = _owner(3, seed=len(batch))
    seen: list[int] = []
    names = NameBlock([name.decode() for name in batch])
    for master, groups in group_by_master(owner, owner_list, names, by_slot):
        for group in groups:
            positions = list(group)
            assert positions == sorted(positions)
            slots = {key_slot(batch[i]) for i in positions}
            assert {owner_list[s] for s in slots} == {master}
            if by_slot:
                assert len(slots) == 1
            seen += positions
    assert sorted(seen) == list(range(len(batch)))


@pytest.mark.parametrize("batch", [*_batches(), ["é{ü}x".encode(), b"", b"{}", b"a{b"]])
def test_native_runs_are_key_slot_runs(batch: list[bytes]) -> None:
    """The native runs are those of `key_slot` name by name: each run's first position and
    slot, a new run exactly where the slot changes."""
    if not native.BUILT:
        pytest.skip("uniradix._native was not built")
    slots = [key_slot(name) for name in batch]
    starts = [i for i in range(len(batch)) if i == 0 or slots[i] != slots[i - 1]]
    got = native.cluster_slot_runs([name.decode() for name in batch])
    assert got == (starts, [slots[i] for i in starts])


def test_native_runs_refuse_what_is_not_a_name() -> None:
    if not native.BUILT:
        pytest.skip("uniradix._native was not built")
    with pytest.raises(TypeError, match=r"names\[1\] is bytes"):
        native.cluster_slot_runs(["a", b"b"])  # type: ignore[list-item]
    assert native.cluster_slot_runs([]) == ([], [])


@pytest.mark.parametrize("batch", _batches(), ids=lambda b: f"{len(b)}-{b[0][:6]!r}")
def test_name_block_packs_as_name_by_name(batch: list[bytes]) -> None:
    """The block's commands are byte for byte those packed from each name's bytes, for the
    whole batch, a run of it and scattered positions, whether the names share a length."""
    names = NameBlock([name.decode() for name in batch])
    assert names.names == batch
    assert (names.grid is not None) == (len(set(map(len, batch))) == 1)
    runs = [None, range(len(batch)), range(3, 7), [0, 5, 2]]
    for positions in runs:
        picked = batch if positions is None else [batch[i] for i in positions]
        assert b"".join(names.command(b"EXISTS", positions)) == b"".join(
            multi_key_command(b"EXISTS", picked)
        )
        assert b"".join(names.key_commands(b"GET", positions)) == b"".join(
            key_commands(b"GET", picked)
        )
    assert names.subset([4, 1]).names == [batch[4], batch[1]]


def test_name_block_of_one_length_only_when_every_name_has_it() -> None:
    """Names whose lengths differ but sum as if they did are not taken for a grid."""
    batch = ["aa", "b", "ccc", "dd"]  # 8 characters, as 4 names of 2
    names = NameBlock(batch)
    assert names.grid is None and names.names == [n.encode() for n in batch]
    assert NameBlock(["ab", "cd"]).grid is not None


@pytest.mark.parametrize("batch", _batches()[:8], ids=lambda b: f"{len(b)}-{b[0][:6]!r}")
def test_a_slot_without_master_is_named(batch: list[bytes], python_and_native: str) -> None:
    """Every way of grouping refuses a batch holding a page of a slot with no master, naming
    that page, as redis-py does."""
    owner, owner_list = _owner(3, seed=1)
    lost = key_slot(batch[len(batch) // 2])
    owner_list[lost] = -1
    owner[lost] = -1
    names = NameBlock([name.decode() for name in batch])
    with pytest.raises(SlotNotCoveredError, match=f"slot {lost} of .* has no master"):
        group_by_master(owner, owner_list, names, by_slot=True)
