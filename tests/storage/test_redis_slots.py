"""A batch grouped by master and slot: every position once, each group in batch order and in
one slot of one master, whichever way the batch is grouped (a loop for short batches, a step
per run of a chain's pages, a sort for batches of many short runs)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from uniradix.key import RadixKey
from uniradix.storage import KeySpace
from uniradix.storage.redis_slots import SLOTS, VECTOR_FROM, group_by_master, key_slot


def _owner(masters: int, seed: int) -> tuple[np.ndarray, list[int]]:
    rng = random.Random(seed)
    owner_list = [rng.randrange(masters) for _ in range(SLOTS)]
    return np.array(owner_list, dtype=np.int64), owner_list


def _batches() -> list[list[bytes]]:
    chained = KeySpace("org/m@rev1", "bfloat16", "layer_first", 1, "full", group_pages=64)
    per_page = KeySpace("org/m@rev1", "bfloat16", "layer_first", 1, "full", group_pages=1)
    out = []
    for space in (chained, per_page):
        for n in (64, VECTOR_FROM - 1, VECTOR_FROM, 1024):
            out.append([k.name.encode() for k in space.keys_for(RadixKey(list(range(n))))])
    out.append([b"plain.%d" % i for i in range(600)])  # no hash tags at all
    out.append([b"k%d.{t}" % i for i in range(10)])  # one tag
    out.append([b"{x%d}k.{t}" % (i % 3) for i in range(10)])  # the first tag counts
    out.append([b"k%d.{t}" % i for i in range(9)] + [b"k.{}"])  # an empty tag: the whole name
    return out


@pytest.mark.parametrize("by_slot", [True, False])
@pytest.mark.parametrize("batch", _batches(), ids=lambda b: f"{len(b)}-{b[0][:6]!r}")
def test_groups_cover_the_batch_in_order_one_master_each(batch: list[bytes], by_slot: bool) -> None:
    owner, owner_list = _owner(3, seed=len(batch))
    seen: list[int] = []
    for master, groups in group_by_master(owner, owner_list, batch, by_slot):
        for group in groups:
            positions = list(group)
            assert positions == sorted(positions)
            slots = {key_slot(batch[i]) for i in positions}
            assert {owner_list[s] for s in slots} == {master}
            if by_slot:
                assert len(slots) == 1
            seen += positions
    assert sorted(seen) == list(range(len(batch)))
