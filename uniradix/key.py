"""RadixKey: the token sequence a tree edge or a lookup is made of.

A key is a run of *units*, each packed as 8 little-endian bytes, plus an optional namespace
(`extra_key`: LoRA id, cache salt). Keys of different namespaces never share a tree node.

Packing into `bytes` lets the tree compare whole edges with one `memcmp` and find the first
differing unit with one big-integer XOR, with no per-token Python loop on long keys.

EAGLE bigram view: N+1 tokens give N units, unit i being the pair (t[i], t[i+1]) packed into
one 64-bit integer, so the tree handles bigrams exactly like tokens.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
import torch

UNIT_BYTES = 8
_BIG_INT_MAX_BYTES = 96 * UNIT_BYTES  # past this, numpy finds a first difference faster
_MAX_BIGRAM_TOKEN = 1 << 32

Tokens: TypeAlias = "list[int] | array[int]"
"""A request's token ids: a list, or an `array("q")`, which packs with one copy."""

ChildKey = Any
"""Key of a node in its parent's children dict: first page bytes, with the namespace if any."""


def _pack(token_ids: Sequence[int] | torch.Tensor | np.ndarray) -> bytes:
    if isinstance(token_ids, array) and token_ids.typecode == "q":
        return token_ids.tobytes()  # already 8-byte integers: one copy, no per-token work
    if isinstance(token_ids, list):
        # An engine's list of ids: `struct` packs one ~3x faster than `array("q", ...)`
        # (9 against 27 ns a token); on a bad id it falls through to `array` for its error.
        try:
            return struct.pack(f"<{len(token_ids)}q", *token_ids)
        except struct.error:
            pass
    if isinstance(token_ids, torch.Tensor):
        token_ids = token_ids.detach().cpu().numpy()
    if isinstance(token_ids, np.ndarray):
        if token_ids.ndim != 1 or token_ids.dtype.kind not in "iu":
            raise TypeError(f"token ids must be a 1-D integer array, got {token_ids.dtype}")
        return bytes(token_ids.astype("<i8", copy=False).tobytes())
    try:
        return array("q", token_ids).tobytes()
    except TypeError as exc:
        raise TypeError(f"token ids must be integers: {exc}") from None


def _bigrams(packed: bytes) -> bytes:
    tokens = np.frombuffer(packed, dtype="<i8")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= _MAX_BIGRAM_TOKEN):
        raise ValueError("bigram keys need token ids in [0, 2**32)")
    pairs = (tokens[:-1].astype("<u8") << np.uint64(32)) | tokens[1:].astype("<u8")
    return bytes(pairs.astype("<i8").tobytes())


class RadixKey:
    """An immutable run of units with a namespace.

    `RadixKey([1, 2, 3])` has 3 units; `RadixKey([1, 2, 3], is_bigram=True)` has 2.
    """

    __slots__ = ("extra_key", "is_bigram", "units")

    start = 0
    """Units of the key before `units` (a `PathTailKey` names them by a tree node)."""

    def __init__(
        self,
        token_ids: Sequence[int] | torch.Tensor | np.ndarray = (),
        extra_key: str | None = None,
        *,
        is_bigram: bool = False,
    ) -> None:
        if extra_key is not None and not isinstance(extra_key, str):
            raise TypeError(f"extra_key must be a str or None, got {extra_key!r}")
        packed = _pack(token_ids)
        self.units: bytes = _bigrams(packed) if is_bigram else packed
        self.extra_key = extra_key or None
        self.is_bigram = is_bigram

    @classmethod
    def from_units(cls, units: bytes, extra_key: str | None, is_bigram: bool) -> RadixKey:
        key = cls.__new__(cls)
        key.units = units
        key.extra_key = extra_key
        key.is_bigram = is_bigram
        return key

    def __len__(self) -> int:
        return self.start + (len(self.units) >> 3)

    def __getitem__(self, item: slice) -> RadixKey:
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError(f"RadixKey supports only contiguous slices, got {item!r}")
        start, stop, _ = item.indices(len(self))
        return RadixKey.from_units(
            self.units[start << 3 : stop << 3], self.extra_key, self.is_bigram
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, RadixKey)
            and self.units == other.units
            and self.extra_key == other.extra_key
            and self.is_bigram == other.is_bigram
            and self.start == other.start == 0  # a path tail key equals only its kind
        )

    def __hash__(self) -> int:
        return hash((self.units, self.extra_key))

    def __repr__(self) -> str:
        shown = self.tolist()
        text = repr(shown[:16])[:-1] + (", ...]" if len(shown) > 16 else "]")
        ns = f", extra_key={self.extra_key!r}" if self.extra_key else ""
        return f"RadixKey({text}{ns})"

    def tolist(self) -> list[int]:
        return [int(t) for t in np.frombuffer(self.units, dtype="<i8")]

    def page_aligned(self, page_size: int) -> RadixKey:
        """The longest prefix made of whole pages (the key itself when already aligned)."""
        n = len(self)
        aligned = n - n % page_size
        return self if aligned == n else self[:aligned]

    def child_key(self, offset: int, page_size: int) -> ChildKey:
        """Children-dict key of the page starting at unit `offset`."""
        page = self.units[offset << 3 : (offset + page_size) << 3]
        return page if self.extra_key is None else (self.extra_key, page)


class PathTailKey(RadixKey):
    """A key whose first `start` units are the root path of the tree node `anchor`, named
    instead of held: `units` holds only the units from `start` on.

    A request prefilled in chunks caches its computed tokens after every chunk, and the tree
    already holds them up to the node the request has locked. Naming that node lets the
    insert walk down from it: no copy of the prefix, no comparison of it, so a chunk costs
    what it adds. Only an insert takes such a key (a match needs every unit); it raises
    ValueError when `anchor` has left the tree or its path is not `start` units long.
    """

    __slots__ = ("anchor", "start")

    def __init__(
        self, anchor: object, start: int, units: bytes, extra_key: str | None, is_bigram: bool
    ) -> None:
        if start < 0:
            raise ValueError(f"start={start} must be >= 0")
        self.anchor = anchor
        self.start = start
        self.units = units
        self.extra_key = extra_key
        self.is_bigram = is_bigram

    def __getitem__(self, item: slice) -> RadixKey:
        """`key[:n]` (n >= start) keeps the anchor; a slice from `start` on is a plain key."""
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError(f"RadixKey supports only contiguous slices, got {item!r}")
        begin, stop, _ = item.indices(len(self))
        start = self.start
        if begin == 0:
            if stop < start:
                raise ValueError(f"key[:{stop}] is shorter than the path tail key's start={start}")
            units = self.units[: (stop - start) << 3]
            return PathTailKey(self.anchor, start, units, self.extra_key, self.is_bigram)
        if begin < start:
            raise ValueError(f"units [{begin}, {start}) of a path tail key are not held")
        units = self.units[(begin - start) << 3 : max(stop - start, 0) << 3]
        return RadixKey.from_units(units, self.extra_key, self.is_bigram)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PathTailKey)
            and self.anchor is other.anchor
            and self.start == other.start
            and self.units == other.units
            and self.extra_key == other.extra_key
            and self.is_bigram == other.is_bigram
        )

    __hash__ = RadixKey.__hash__

    def __repr__(self) -> str:
        tail = RadixKey.from_units(self.units, self.extra_key, self.is_bigram)
        return f"PathTailKey(start={self.start}, tail={tail!r})"

    def tolist(self) -> list[int]:
        raise ValueError(f"the first {self.start} units of a path tail key are not held")

    def child_key(self, offset: int, page_size: int) -> ChildKey:
        if offset < self.start:
            raise ValueError(f"offset={offset} is before start={self.start} (not held)")
        return super().child_key(offset - self.start, page_size)


class GrowingKey:
    """The packed key of a request's computed tokens, grown as they grow.

    A request prefilled in chunks caches its prefix after every chunk; repacking all its
    tokens each time costs O(L) per chunk, O(L^2 / C) per prompt. `key(tokens, n)` packs only
    the tokens past those it already holds. The tokens it holds must not change (they are
    computed KV); a shorter `n` drops units from the end.
    """

    __slots__ = ("_num_tokens", "_units", "extra_key", "is_bigram")

    def __init__(self, extra_key: str | None, is_bigram: bool) -> None:
        self.extra_key = extra_key or None
        self.is_bigram = is_bigram
        self._units = bytearray()
        self._num_tokens = 0

    def key(self, tokens: Tokens, num_tokens: int) -> RadixKey:
        """The key of `tokens[:num_tokens]` (as `RadixKey(tokens[:num_tokens], ...)`)."""
        self._grow(tokens, num_tokens)
        return RadixKey.from_units(bytes(self._units), self.extra_key, self.is_bigram)

    def tail(self, tokens: Tokens, num_tokens: int, anchor: object, start: int) -> PathTailKey:
        """The key of `tokens[:num_tokens]` whose first `start` units are the path of the
        tree node `anchor` (see `PathTailKey`): copies only the units past `start`."""
        self._grow(tokens, num_tokens)
        begin = start << 3
        if not 0 <= begin <= len(self._units):
            raise ValueError(f"start={start} outside [0, {len(self._units) >> 3}] units")
        with memoryview(self._units) as held:  # one copy of the tail, no copy of the rest
            units = bytes(held[begin:])
        return PathTailKey(anchor, start, units, self.extra_key, self.is_bigram)

    def _grow(self, tokens: Tokens, num_tokens: int) -> None:
        if not 0 <= num_tokens <= len(tokens):
            raise ValueError(f"num_tokens={num_tokens} outside [0, {len(tokens)}]")
        have = self._num_tokens
        if num_tokens > have:
            if self.is_bigram:  # the first new unit pairs the last held token with the next
                self._units += _bigrams(_pack(tokens[max(have - 1, 0) : num_tokens]))
            else:
                self._units += _pack(tokens[have:num_tokens])
        elif num_tokens < have:
            units = max(num_tokens - 1, 0) if self.is_bigram else num_tokens
            del self._units[units << 3 :]
        self._num_tokens = num_tokens


def common_prefix_len(a: bytes, b: bytes) -> int:
    """Number of leading units `a` and `b` share (bytes of packed units)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n >> 3
    if n > _BIG_INT_MAX_BYTES:
        # Long edges (a long prompt diverging inside a cached document): one vectorised
        # compare; the big-integer XOR below grows superlinearly (~200 µs at 20k units).
        units = n >> 3
        differ = np.frombuffer(a, "<i8", units) != np.frombuffer(b, "<i8", units)
        return int(differ.argmax())
    diff = int.from_bytes(a[:n], "little") ^ int.from_bytes(b[:n], "little")
    return ((diff & -diff).bit_length() - 1) >> 6
