"""StepEvents: one step's events as the recorder derives them, in arrays, turned into
Python objects only when something reads them.

A `BlockStored` of a Mooncake request carries ~12,600 token ids and ~800 hashes; as
`list[int]` they are that many Python ints, made at the flush (~0.5 ms at page 16, most of
the flush) and dropped once the sender encoded them, churning the allocator and the CPU
caches the next cache calls need. `StepEvents` keeps each event's hashes as a numpy view of
the node digests and its tokens as the key's packed units: a publisher that only sends
bytes (`ZmqEventPublisher`, on its sender thread) encodes the msgpack arrays from those
buffers in one native pass each (`msgpack_ints`; without the native module, through a list
as before), and a `NullEventPublisher` touches nothing.
Anything that reads the events (iterating, indexing, `==`) gets the very `BlockStored` /
`BlockRemoved` structs the recorder used to build, made once; the bytes on the wire are
identical either way (tests compare them).

The recorder's flush goes no further than the step's runs (`StepRun`: the digests' cells
and units per event, nothing else): the hashing, the numpy views, the parent's published
hash and the event records are made by whoever reads or encodes the step, the ZMQ
publisher's sender thread in the default set-up. So the scheduler's thread runs none of that
code between its cache calls (each step's hashing, numpy and struct code evicted the
instructions and data the next `match` needed: `benchmarks/events_ops.py`), and a null
publisher runs none of it at all. The sender thread drops no tree node (`take_step` clears
each run's `end`): its reference counts would be written from another core.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import msgspec
import numpy as np

from uniradix import native
from uniradix.events.types import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from uniradix.hashing.node_digests import PageDigests, hash_cells
from uniradix.hashing.page import DIGEST_BYTES

_encoder = msgspec.msgpack.Encoder()


def msgpack_ints(values: np.ndarray) -> bytes:
    """The msgpack array of `values` (1-D int64 or uint64): msgspec's bytes for the same
    Python ints, read in place by the native module where it was built."""
    if native.HAVE_NATIVE:
        return native.msgpack_ints(values)
    return _encoder.encode(values.tolist())


# The events with their two long arrays pre-encoded: the same tags, fields, order and
# defaults as `types.BlockStored` / `BlockRemoved`, so msgspec writes the same bytes.
class _RawStored(msgspec.Struct, tag="BlockStored", omit_defaults=True):
    block_hashes: msgspec.Raw
    parent_block_hash: int | None
    token_ids: msgspec.Raw
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    cache_salt: str | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class _RawRemoved(msgspec.Struct, tag="BlockRemoved", omit_defaults=True):
    block_hashes: msgspec.Raw
    medium: str | None
    group_idx: int | None = None


class StepRun:
    """Records of one step merged into one event (the recorder's coalescing): the nodes'
    digests (cells, hashed by whoever makes the event) and units, joined once when the event
    is made. A store run keeps the digests of the node it chains from (`prior`, None at the
    root), whose last page's published hash is its parent hash, and the node it ends at
    (`end`: a store below it continues the run)."""

    __slots__ = ("cells", "end", "lora_name", "medium", "prior", "removed", "units")

    def __init__(
        self,
        medium: str,
        removed: bool,
        lora_name: str | None = None,
        prior: PageDigests | None = None,
    ) -> None:
        self.medium = medium
        self.removed = removed
        self.lora_name = lora_name
        self.prior = prior
        self.cells: list[PageDigests] = []
        self.units: list[bytes] = []
        self.end: object = None


Published = Callable[[bytes], np.ndarray]  # digests -> published hashes (`BlockHashing`)


@dataclass(frozen=True)
class StoredShape:
    """What every `BlockStored` of one recorder shares. `bigram`: the units are EAGLE pairs
    `a << 32 | b`, each page's token being `a`."""

    block_size: int
    cache_salt: str | None
    group_idx: int | None
    kv_cache_spec_kind: str | None
    bigram: bool

    def tokens(self, units: bytes) -> np.ndarray:
        values = np.frombuffer(units, dtype="<i8")
        return values >> 32 if self.bigram else values


@dataclass(frozen=True)
class PackedStored:
    hashes: np.ndarray  # published hashes, page order
    parent_hash: int | None
    units: bytes  # the pages' packed key units
    medium: str
    lora_name: str | None
    shape: StoredShape

    def event(self) -> BlockStored:
        tokens: list[int] = self.shape.tokens(self.units).tolist()
        stored: BlockStored = self._struct(BlockStored, self.hashes.tolist(), tokens)
        return stored

    def raw(self, wire: str) -> Any:
        s = self.shape
        hashes = msgspec.Raw(msgpack_ints(self.hashes))
        tokens = msgspec.Raw(msgpack_ints(s.tokens(self.units)))
        if wire == "map":
            return self._struct(_RawStored, hashes, tokens)
        out: list[Any] = ["BlockStored", hashes, self.parent_hash, tokens]
        out += [s.block_size, None, self.medium]  # block_size, lora_id, medium
        if wire == "sglang-array" and s.cache_salt:
            out.append({"cache_salt": s.cache_salt})
        return out

    def _struct(self, cls: type[msgspec.Struct], hashes: Any, tokens: Any) -> Any:
        """`cls` (`BlockStored`, or its twin with pre-encoded arrays) of this event."""
        s = self.shape
        return cls(
            hashes,
            self.parent_hash,
            tokens,
            s.block_size,
            None,
            self.medium,
            self.lora_name,
            cache_salt=s.cache_salt,
            group_idx=s.group_idx,
            kv_cache_spec_kind=s.kv_cache_spec_kind,
        )


@dataclass(frozen=True)
class PackedRemoved:
    hashes: np.ndarray  # published hashes, deepest first
    medium: str
    group_idx: int | None

    def event(self) -> BlockRemoved:
        return BlockRemoved(self.hashes.tolist(), self.medium, group_idx=self.group_idx)

    def raw(self, wire: str) -> Any:
        hashes = msgspec.Raw(msgpack_ints(self.hashes))
        if wire == "map":
            return _RawRemoved(hashes, self.medium, group_idx=self.group_idx)
        return ["BlockRemoved", hashes, self.medium]


Packed = PackedStored | PackedRemoved


def pack_run(run: StepRun, published: Published, shape: StoredShape) -> Packed:
    """`run`'s event in arrays: its digests joined and read as published hashes."""
    if run.removed:
        # Each node's pages deepest first, nodes in removal order: the pages of the nodes
        # joined in reverse order, read backwards (one join, one view).
        blob = b"".join([c.blob() for c in reversed(run.cells)])
        return PackedRemoved(published(blob)[::-1], run.medium, shape.group_idx)
    blob = b"".join([c.blob() for c in run.cells])
    units = run.units[0] if len(run.units) == 1 else b"".join(run.units)
    parent_hash = None
    if run.prior is not None:
        parent_hash = int(published(run.prior.blob()[-DIGEST_BYTES:])[0])
    return PackedStored(published(blob), parent_hash, units, run.medium, run.lora_name, shape)


class StepEvents(Sequence[KVEvent]):
    """One step's events (`AllBlocksCleared` first when `cleared`, then one per run, in
    order): a sequence of `KVEvent`, made on first read, that also encodes itself without
    them. The runs are packed (`packed`) on first use, by whichever thread reads or encodes
    the step; nothing changes them after the recorder hands them over."""

    def __init__(
        self, cleared: bool, runs: list[StepRun], published: Published, shape: StoredShape
    ) -> None:
        self.cleared = cleared
        self._runs = runs
        self._published = published
        self._shape = shape
        self._packed: list[Packed] | None = None
        self._events: list[KVEvent] | None = None

    @property
    def runs(self) -> list[StepRun]:
        return self._runs

    @property
    def packed(self) -> list[Packed]:
        if self._packed is None:
            hash_cells(self.cells())
            published, shape = self._published, self._shape
            self._packed = [pack_run(run, published, shape) for run in self._runs]
        return self._packed

    def cells(self) -> Iterator[PageDigests]:
        """The digests the step's events read: each run's and each store's parent's."""
        for run in self._runs:
            yield from run.cells
            if run.prior is not None:
                yield run.prior

    def events(self) -> list[KVEvent]:
        if self._events is None:
            head: list[KVEvent] = [AllBlocksCleared()] if self.cleared else []
            self._events = head + [p.event() for p in self.packed]
        return self._events

    def encode(self, ts: float, dp_rank: int, wire: str) -> bytes:
        """The batch's msgpack payload in the `wire` shape (`wire.encode_batch`'s bytes)."""
        head: list[Any] = []
        if self.cleared:
            head = [AllBlocksCleared() if wire == "map" else ["AllBlocksCleared"]]
        return _encoder.encode([ts, head + [p.raw(wire) for p in self.packed], dp_rank])

    def __len__(self) -> int:
        return len(self._runs) + self.cleared

    @overload
    def __getitem__(self, index: int) -> KVEvent: ...
    @overload
    def __getitem__(self, index: slice) -> list[KVEvent]: ...
    def __getitem__(self, index: int | slice) -> KVEvent | list[KVEvent]:
        return self.events()[index]

    def __iter__(self) -> Iterator[KVEvent]:
        return iter(self.events())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepEvents):
            return self.events() == other.events()
        if isinstance(other, Sequence):
            return self.events() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking, compared by content

    def __repr__(self) -> str:
        return f"StepEvents({self.events()!r})"
