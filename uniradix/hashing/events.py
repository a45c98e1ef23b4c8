"""Block hash algorithms of the KV events (docs/events.md).

- `sglang_sha256` (default): SGLang's seedless SHA-256 page chain (`uniradix.hashing.page`),
  published as the first 8 bytes, big-endian, signed. The SGLang router recomputes exactly
  this chain on request tokens; every other router treats hashes as opaque.
- `vllm_sha256_cbor`: vLLM's `sha256_cbor` block hash, for consumers that reproduce vLLM's
  hashes (llm-d before its #202). Block `i`'s digest is
  `SHA-256(canonical CBOR of [H(i-1), [tokens of block i], extra_keys])`, `H(-1)` being
  `NONE_HASH = SHA-256(CBOR text of PYTHONHASHSEED)` (`hash_seed` here: without it vLLM
  uses random bytes no router could match, so it is required); `extra_keys` is null or the
  array of the LoRA name (every block) and the cache salt (the sequence's first block only).
  Published as the last 8 bytes, big-endian, unsigned, as vLLM does.

A `BlockHashing` names one algorithm with its seed: its `hasher` plugs into the cache's
`NodeDigests` (so each page is hashed once per node whatever publishes it; None is SGLang's
chain, the table's own) and `published` turns a node's digests into the integers on the
wire, with no per-page Python work. Both chains hash in one native call per node when
`uniradix.native` is built (the same bytes as the Python code here).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from uniradix import native
from uniradix.hashing.node_digests import PageHasher
from uniradix.hashing.page import DIGEST_BYTES, salt_seed
from uniradix.key import UNIT_BYTES

HASH_ALGOS = ("sglang_sha256", "vllm_sha256_cbor")


# ---------------------------------------------------------------------- vLLM sha256_cbor
# CBOR (RFC 8949) heads: major type in the top 3 bits, then the argument in the low 5 bits
# (< 24) or in the 1, 2, 4 or 8 big-endian bytes that follow (24, 25, 26, 27).
_UINT, _BYTES, _TEXT, _ARRAY = 0, 2, 3, 4
_NULL = b"\xf6"
_WIDTHS = ((1 << 8, 1, 24), (1 << 16, 2, 25), (1 << 32, 4, 26), (1 << 64, 8, 27))  # for heads


def _head(major: int, n: int) -> bytes:
    if n < 24:
        return bytes([major << 5 | n])
    for limit, width, code in _WIDTHS:
        if n < limit:
            return bytes([major << 5 | code]) + n.to_bytes(width, "big")
    raise ValueError(f"CBOR argument {n} does not fit 64 bits")


def _text(s: str) -> bytes:
    data = s.encode()
    return _head(_TEXT, len(data)) + data


_LIMITS = np.array([24, 1 << 8, 1 << 16, 1 << 32], dtype=np.uint64)
_CODES = np.array([0, 24, 25, 26, 27], dtype=np.uint8)
_ARG_BYTES = np.array([0, 1, 2, 4, 8], dtype=np.int64)


def _cbor_uints(tokens: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Every token as a CBOR unsigned integer (shortest form, as canonical CBOR needs), in
    one buffer, with the byte offset where each token starts (and the end, last)."""
    values = tokens.astype(np.uint64)
    size = np.searchsorted(_LIMITS, values, side="right")  # 0: in the head; 1-4: 1-8 bytes
    nbytes = _ARG_BYTES[size]
    rows = np.empty((len(values), 9), dtype=np.uint8)
    # Head byte (major type 0): the value itself below 24, else the argument-size code.
    rows[:, 0] = np.where(size == 0, values, _CODES[size]).astype(np.uint8)
    # Argument: the value's last `nbytes` big-endian bytes, moved to the row's front.
    big = values.astype(">u8").view(np.uint8).reshape(-1, 8)
    gather = np.minimum((8 - nbytes)[:, None] + np.arange(8), 7)
    rows[:, 1:] = np.take_along_axis(big, gather, axis=1)
    width = 1 + nbytes
    data = rows[np.arange(9) < width[:, None]].tobytes()
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(width, out=offsets[1:])
    return data, offsets


@dataclass(frozen=True)
class VllmCborHasher:
    cache_salt: str | None = None

    def __call__(
        self, units: bytes, page_size: int, prior: bytes | None, lora: str | None, at_root: bool
    ) -> bytes:
        num_pages = len(units) // (UNIT_BYTES * page_size)
        if num_pages == 0:
            return b""
        if prior is None:
            raise ValueError("vllm_sha256_cbor chains start at NONE_HASH, not None")
        tokens = np.frombuffer(units, dtype="<i8", count=num_pages * page_size)
        if tokens.min() < 0:
            raise ValueError(f"vllm_sha256_cbor needs token ids >= 0, got {int(tokens.min())}")
        # Block i's message: lead || H(i-1) || array head || its tokens || extra keys.
        lead = bytes([_ARRAY << 5 | 3]) + _head(_BYTES, DIGEST_BYTES)
        array = _head(_ARRAY, page_size)
        lora_keys = [_text(lora)] if lora else []
        extra = _head(_ARRAY, len(lora_keys)) + b"".join(lora_keys) if lora_keys else _NULL
        first_extra = extra  # the sequence's first block also carries the cache salt
        if at_root and self.cache_salt:
            keys = [*lora_keys, _text(self.cache_salt)]
            first_extra = _head(_ARRAY, len(keys)) + b"".join(keys)
        if native.HAVE_NATIVE:
            return native.cbor_chain_digests(
                units, page_size, prior, (lead, array, first_extra, extra)
            )
        data, offsets = _cbor_uints(tokens)
        bounds = offsets[::page_size].tolist()
        sha256 = hashlib.sha256
        digests: list[bytes] = []
        for p in range(num_pages):
            page = data[bounds[p] : bounds[p + 1]]
            prior = sha256(lead + prior + array + page + (extra if p else first_extra)).digest()
            digests.append(prior)
        return b"".join(digests)


def vllm_none_hash(hash_seed: str) -> bytes:
    """vLLM's `NONE_HASH` under `sha256_cbor` with `PYTHONHASHSEED=hash_seed`."""
    return hashlib.sha256(_text(hash_seed)).digest()


# ---------------------------------------------------------------------- the choice
@dataclass(frozen=True)
class BlockHashing:
    """One block hash algorithm and its root seed. `unsigned_tail`: published values are the
    last 8 bytes unsigned (vLLM), else the first 8 bytes signed (SGLang)."""

    algo: str
    hasher: PageHasher | None  # None: SGLang's chain, the cache's `NodeDigests` default
    seed: bytes | None
    unsigned_tail: bool

    def published(self, blob: bytes) -> np.ndarray:
        """The published integer of every digest in `blob` (a view, in page order)."""
        if self.unsigned_tail:
            return np.frombuffer(blob, dtype=">u8")[3::4]
        return np.frombuffer(blob, dtype=">i8")[::4]


def block_hashing(
    algo: str = "sglang_sha256",
    cache_salt: str | None = None,
    hash_seed: str | None = None,
    bigram: bool = False,
) -> BlockHashing:
    if algo == "sglang_sha256":
        return BlockHashing(algo, None, salt_seed(cache_salt), False)
    if algo == "vllm_sha256_cbor":
        if bigram:
            raise ValueError("vllm_sha256_cbor has no EAGLE bigram form; use sglang_sha256")
        if hash_seed is None:
            raise ValueError(
                "vllm_sha256_cbor needs hash_seed (vLLM's PYTHONHASHSEED): without it vLLM "
                "seeds chains with random bytes no router can reproduce"
            )
        return BlockHashing(
            algo, VllmCborHasher(cache_salt or None), vllm_none_hash(hash_seed), True
        )
    raise ValueError(f"unknown hash_algo {algo!r}; choose from {HASH_ALGOS}")
