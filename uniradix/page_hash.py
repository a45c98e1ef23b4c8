"""Chained page digests: the identity of a cached page across processes and machines.

A page's digest is `SHA-256(prior digest || the page's units as little-endian uint32)`, the
prior digest being the previous page's (or the chain's seed, or nothing at the root), so a
digest names the page *and everything before it*. This is SGLang's chain, bit for bit: KV
events publish it (`digest_to_int64`) and the routers that recompute it on request tokens
agree with us; L3 storage keys are built on it too.

A unit wider than uint32 (a bigram, or a token id >= 2**32) switches the page to a tagged
wide encoding (`0xff` then int64 little-endian), so no two different pages share bytes.

Seeds: `salt_seed` for a cache salt (the events' chain), `namespace_seed` for an
`extra_key` and a salt (the storage chain: two LoRAs never share a page key).
"""

from __future__ import annotations

import hashlib

import numpy as np

from uniradix.key import UNIT_BYTES

DIGEST_BYTES = 32
_WIDE_TAG = b"\xff"
_U32_MAX = (1 << 32) - 1


def page_digests(units: bytes, page_size: int, prior: bytes | None = None) -> list[bytes]:
    """Digests of each whole page of `units` (packed `RadixKey.units`), chained from `prior`
    (the digest of the page before them, or a seed; None at the root). A trailing partial
    page is not hashed."""
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    if prior is not None and len(prior) != DIGEST_BYTES:
        raise ValueError(f"prior digest must be {DIGEST_BYTES} bytes, got {len(prior)}")
    num_pages = len(units) // (UNIT_BYTES * page_size)
    tokens = np.frombuffer(units, dtype="<i8", count=num_pages * page_size)
    pages = tokens.reshape(num_pages, page_size)
    # One vectorised range check and one conversion for all pages; each page then hashes its
    # narrow bytes (uint32 units) or, if any unit does not fit, the tagged wide bytes.
    narrow = ((pages.min(axis=1) >= 0) & (pages.max(axis=1) <= _U32_MAX)).tolist()
    data, step = tokens.astype("<u4").tobytes(), 4 * page_size
    wide_step = UNIT_BYTES * page_size
    sha256 = hashlib.sha256
    digests: list[bytes] = []
    for p, is_narrow in enumerate(narrow):
        if is_narrow:
            page = data[p * step : (p + 1) * step]
        else:
            page = _WIDE_TAG + units[p * wide_step : (p + 1) * wide_step]
        prior = sha256(page if prior is None else prior + page).digest()
        digests.append(prior)
    return digests


def digest_to_int64(digest: bytes) -> int:
    """The published block hash: the digest's first 8 bytes as a big-endian signed int64."""
    return int.from_bytes(digest[:8], "big", signed=True)


def salt_seed(cache_salt: str | None) -> bytes | None:
    """Root seed of a salted chain (None: no salt, the chain starts unseeded)."""
    if not cache_salt:
        return None
    return hashlib.sha256(b"sglang-cache-salt-v1\0" + cache_salt.encode()).digest()


def namespace_seed(extra_key: str | None, cache_salt: str | None = None) -> bytes | None:
    """Root seed binding a chain to a namespace (LoRA / `extra_key`) and a salt; None when
    neither is set. Each part is presence- and length-prefixed, so ("a", "bc") and
    ("ab", "c") seed differently."""
    if not extra_key and not cache_salt:
        return None
    h = hashlib.sha256(b"sglang-cache-namespace-v1")
    for part in (extra_key, cache_salt):
        if part:
            data = part.encode()
            h.update(b"\x01" + len(data).to_bytes(8, "little") + data)
        else:
            h.update(b"\x00")
    return h.digest()
