"""Which Redis Cluster slot each key of a batch lies in, and a batch grouped by master and slot.

A cluster hashes a key's first non-empty `{hash tag}`, or the whole key without one (CRC16
mod 16,384). A batch of a chain's pages (`uniradix.hashing.storage_keys`: names of one
length, the tag at their end) comes in runs of one tag. With the native module built, any
batch is cut into runs of one slot in one pass of C (`native.cluster_slot_runs`: a
`memchr` pair and a `memcmp` a name, a CRC a run; a few passes of numpy less over the
batch's bytes). Without it, such a batch is read as one byte array (numpy: one CRC per
run of a tag and no Python work per page); other names take the per-key rule, and so do
batches under 256 names (a loop costs less than numpy's calls there).
"""

from __future__ import annotations

from binascii import crc_hqx
from collections.abc import Sequence
from itertools import chain, repeat
from typing import NoReturn

import numpy as np
from redis.exceptions import SlotNotCoveredError

from uniradix import native
from uniradix.storage.redis_wire import NameBlock

SLOTS = 16384
VECTOR_FROM = 256
RUN_FROM = 8  # names per run, on average, from which the batch is grouped run by run
_OPEN, _CLOSE = ord("{"), ord("}")


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


def slot_runs(names: NameBlock) -> tuple[np.ndarray, np.ndarray]:
    """The batch as runs of consecutive names in one slot: each run's start and its slot
    (int64 arrays). A chain's pages come in runs of one tag: one CRC per run."""
    words = _tail_tags(names)
    if words is None:
        slots = np.array([key_slot(name) for name in names.names], dtype=np.int64)
        return np.arange(len(names)), slots
    differs = words[1:] != words[:-1]
    changed = differs[:, 0] if words.shape[1] == 1 else differs.any(axis=1)
    starts = np.flatnonzero(np.concatenate(([True], changed)))
    text = names.text
    begin, end = text[0].find("{") + 1, len(text[0]) - 1
    crcs = [crc_hqx(text[i][begin:end].encode(), 0) % SLOTS for i in starts.tolist()]
    return starts, np.array(crcs, dtype=np.int64)


def _tail_tags(names: NameBlock) -> np.ndarray | None:
    """Each name's tag as a row of 8-byte words (zero-padded), when every name has one
    length, its only `{` at one place and its first `}` after it last; None otherwise."""
    grid = names.grid
    if grid is None:
        return None
    count, width = grid.shape
    start = names.text[0].find("{")
    if start < 0 or start + 2 >= width:
        return None
    if (
        not (grid[:, start] == _OPEN).all()
        or not (grid[:, width - 1] == _CLOSE).all()
        # so no `{` before the tag's (counted on the whole contiguous block: the framing
        # holds none, and a strided count of the names alone costs half as much again)
        or np.count_nonzero(names.rows == _OPEN) != count
    ):
        return None
    padded = np.zeros((count, -(-(width - start - 2) // 8) * 8), dtype=np.uint8)
    padded[:, : width - start - 2] = grid[:, start + 1 : width - 1]
    if (padded == _CLOSE).any():  # a `}` inside: the tag ends before the name does
        return None
    return padded.view(np.uint64)


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
    if native.HAVE_NATIVE:  # the runs in one pass of C, whatever the names
        starts, slots = native.cluster_slot_runs(names.text)
        return _group(owner, owner_list, names, starts, slots, by_slot)
    tag = shared_tag(names.text)
    if tag is not None:  # one group of a chain's pages (a lookup of up to 64): one slot
        tagged = tag_slot(tag)
        if owner_list[tagged] < 0:
            raise SlotNotCoveredError(f"slot {tagged} of {names.text[0]!r} has no master")
        return [(owner_list[tagged], [range(len(names))])]
    if len(names) < VECTOR_FROM:  # numpy's cost per call is more than a short loop's
        groups: dict[int, dict[int, list[int]]] = {}
        known: dict[bytes, int] = {}
        for pos, name in enumerate(names.names):
            part = _hashed_part(name)
            slot = known.get(part)
            if slot is None:
                slot = known[part] = crc_hqx(part, 0) % SLOTS
            master = owner_list[slot]
            if master < 0:
                raise SlotNotCoveredError(f"slot {slot} of {name!r} has no master")
            groups.setdefault(master, {}).setdefault(slot if by_slot else 0, []).append(pos)
        return [(master, list(by.values())) for master, by in groups.items()]
    run_starts, run_slots = slot_runs(names)
    return _group(owner, owner_list, names, run_starts.tolist(), run_slots.tolist(), by_slot)


def _group(
    owner: np.ndarray,
    owner_list: list[int],
    names: NameBlock,
    starts: list[int],
    slots: list[int],
    by_slot: bool,
) -> list[tuple[int, list[Sequence[int]]]]:
    """`group_by_master` from the batch's runs of one slot (`slot_runs`): a step per run
    when runs are long, else a stable sort of the names by master (and slot)."""
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
