"""Which Redis Cluster slot each key of a batch lies in, and a batch grouped by master and slot.

A cluster hashes a key's first non-empty `{hash tag}`, or the whole key without one (CRC16
mod 16,384). A batch of a chain's pages (`uniradix.hashing.storage_keys`: names of one
length, the tag at their end) comes in runs of one tag, so a batch is cut into runs of
consecutive names in one slot and grouped a step per run. The runs come from one pass of C
(`native.cluster_slot_runs`: a `memchr` pair and a `memcmp` a name, a CRC a run) or, where
the native module is not built, from the same rule in Python (`slot_runs`).
"""

from __future__ import annotations

from binascii import crc_hqx
from collections.abc import Sequence
from itertools import chain, repeat
from typing import NoReturn

import numpy as np
from redis.exceptions import SlotNotCoveredError

from uniradix import native
from uniradix.storage.redis_wire import NameBlock, encode_names

SLOTS = 16384
RUN_FROM = 8  # names per run, on average, from which the batch is grouped run by run


def key_slot(name: bytes) -> int:
    """A key's cluster slot: CRC16 of the key, or of its {hash tag} when it has one."""
    return crc_hqx(_hashed_part(name), 0) % SLOTS


def tag_slot(tag: bytes) -> int:
    """The cluster slot of every key whose hash tag is `tag` (without its braces)."""
    return crc_hqx(tag, 0) % SLOTS


def _hashed_part(name: bytes) -> bytes:
    """What a cluster hashes of a key: the first {hash tag} when not empty, else all of it."""
    start = name.find(b"{")
    if start >= 0:
        end = name.find(b"}", start + 1)
        if end > start + 1:
            return name[start + 1 : end]
    return name


def slot_runs(names: Sequence[str]) -> tuple[list[int], list[int]]:
    """Each run of consecutive names in one slot: its first index and its slot."""
    if native.HAVE_NATIVE:
        return native.cluster_slot_runs(names)
    starts: list[int] = []
    slots: list[int] = []
    last_part, last_slot = None, -1
    for pos, part in enumerate(map(_hashed_part, encode_names(names))):
        if part != last_part:  # a chain's pages share their part: a CRC per run
            last_part, slot = part, crc_hqx(part, 0) % SLOTS
            if slot != last_slot:
                starts.append(pos)
                slots.append(slot)
                last_slot = slot
    return starts, slots


def shared_tag(names: Sequence[str]) -> bytes | None:
    """The hash tag (without braces) when every name ends in the same `{tag}` and has no
    other `{`, so every name lies in its slot; None otherwise. No Python work per name."""
    if not names:
        return None
    first = names[0]
    start = first.find("{")
    if start < 0 or first.find("}", start + 1) != len(first) - 1 or start + 2 >= len(first):
        return None
    tail = first[start:]
    # The last name first: a batch of a chain's groups ends in another tag.
    if not names[-1].endswith(tail) or not all(map(str.endswith, names, repeat(tail))):
        return None
    if "".join(names).count("{") != len(names):  # a `{` before the tag
        return None
    return tail[1:-1].encode()


def group_by_master(
    owner: np.ndarray, owner_list: list[int], names: NameBlock, by_slot: bool
) -> list[tuple[int, list[Sequence[int]]]]:
    """The batch's positions grouped by master (`owner[slot]`: the master's index, -1 for
    none, as an array and as a list), each master's in one group or, with `by_slot`, one
    per slot, every group in batch order (a run of a chain's pages: a `range`). Raises
    `SlotNotCoveredError` for a name whose slot has no master."""
    starts, slots = slot_runs(names.text)
    # Long runs (a chain's pages): a step per run; else a stable sort by master (and slot).
    if len(starts) * RUN_FROM <= len(names):
        owners = [owner_list[slot] for slot in slots]
        if min(owners, default=0) < 0:
            _not_covered(names, starts[owners.index(-1)])
        return _group_runs(starts, slots, owners, len(names), by_slot)
    lengths = np.diff(np.append(starts, len(names)))
    run_owners = owner[slots]
    if (run_owners < 0).any():
        _not_covered(names, starts[int(np.argmax(run_owners < 0))])
    slot_of, owner_of = np.repeat(slots, lengths), np.repeat(run_owners, lengths)
    rank = owner_of * SLOTS + slot_of if by_slot else owner_of
    order = np.argsort(rank, kind="stable")
    ranked = rank[order]
    out: list[tuple[int, list[Sequence[int]]]] = []
    for group in np.split(order, np.flatnonzero(ranked[1:] != ranked[:-1]) + 1):
        master = int(owner_of[group[0]])
        if out and out[-1][0] == master:
            out[-1][1].append(group.tolist())
        else:
            out.append((master, [group.tolist()]))
    return out


def _not_covered(names: NameBlock, position: int) -> NoReturn:
    name = names.text[position]
    raise SlotNotCoveredError(f"slot {key_slot(name.encode())} of {name!r} has no master")


def _group_runs(
    starts: list[int], slots: list[int], owners: list[int], count: int, by_slot: bool
) -> list[tuple[int, list[Sequence[int]]]]:
    """`group_by_master` from the batch's runs (`slot_runs`): a step per run, not per name."""
    masters: dict[int, dict[int, list[range]]] = {}
    for start, end, slot, master in zip(starts, [*starts[1:], count], slots, owners, strict=True):
        runs = masters.setdefault(master, {}).setdefault(slot if by_slot else 0, [])
        runs.append(range(start, end))
    return [
        (
            master,
            [
                runs[0] if len(runs) == 1 else list(chain.from_iterable(runs))
                for runs in by.values()
            ],
        )
        for master, by in masters.items()
    ]
