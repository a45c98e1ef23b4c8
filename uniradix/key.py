"""RadixKey: the token sequence a tree edge or a lookup is made of.

A key is a run of *units*, each packed as 8 little-endian bytes, plus an optional namespace
(`extra_key`: LoRA id, cache salt). Keys of different namespaces never share a tree node.

Packing into `bytes` lets the tree compare whole edges with one `memcmp` and find the first
differing unit with one big-integer XOR, with no per-token Python loop on long keys.

EAGLE bigram view: N+1 tokens give N units, unit i being the pair (t[i], t[i+1]) packed into
one 64-bit integer, so the tree handles bigrams exactly like tokens.
"""

from __future__ import annotations

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
        return len(self.units) >> 3

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
        return RadixKey.from_units(bytes(self._units), self.extra_key, self.is_bigram)


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
