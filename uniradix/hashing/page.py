"""Chained page digests: the identity of a cached page across processes and machines.

A page's digest is `SHA-256(prior digest || the page's units as little-endian uint32)`, the
prior digest being the previous page's (or the chain's seed, or nothing at the root), so a
digest names the page *and everything before it*. This is SGLang's chain, bit for bit: KV
events publish it (`digest_to_int64`) and the routers that recompute it on request tokens
agree with us; L3 storage keys are built on it too.

A unit wider than uint32 (a token id >= 2**32 or < 0) switches the page to a tagged wide
encoding (`0xff` then int64 little-endian), so no two different pages share bytes. EAGLE
bigram units are hashed as SGLang's bigram hasher does: both halves of each pair, in order.

The chain runs in one native call per key when `uniradix.native` is built (a few times
faster: no per-page Python, SHA-256 on the CPU's SHA extensions), else in Python with
`hashlib`; both give the same bytes.

Seeds: `salt_seed` for a cache salt (the events' chain), `namespace_seed` for an
`extra_key` and a salt (the storage chain: two LoRAs never share a page key).
"""

from __future__ import annotations

import hashlib

import numpy as np

from uniradix import native
from uniradix.key import UNIT_BYTES

DIGEST_BYTES = 32
_WIDE_TAG = b"\xff"
_U32_MAX = (1 << 32) - 1


def chain_digests(
    units: bytes, page_size: int, prior: bytes | None = None, bigram: bool = False
) -> bytes:
    """Digests of each whole page of `units` (packed `RadixKey.units`), chained from `prior`
    (the digest of the page before them, or a seed; None at the root), concatenated: page
    `i`'s digest is `out[32 * i : 32 * (i + 1)]`. A trailing partial page is not hashed.

    `bigram` reads each unit as an EAGLE pair `(a, b)` (`a << 32 | b`) and hashes `a` then
    `b` as uint32 little-endian, as SGLang's bigram hasher does.
    """
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    if prior is not None and len(prior) != DIGEST_BYTES:
        raise ValueError(f"prior digest must be {DIGEST_BYTES} bytes, got {len(prior)}")
    if native.HAVE_NATIVE:
        return native.chain_digests(units, page_size, prior, bigram)
    num_pages = len(units) // (UNIT_BYTES * page_size)
    if num_pages == 0:
        return b""
    tokens = np.frombuffer(units, dtype="<i8", count=num_pages * page_size)
    if bigram:
        # Each little-endian int64 unit is (b, a) as two uint32 words: swap them to (a, b).
        data = tokens.view("<u4").reshape(-1, 2)[:, ::-1].tobytes()
        pages = _slices(data, 8 * page_size, num_pages)
    elif tokens.min() >= 0 and tokens.max() <= _U32_MAX:
        pages = _slices(tokens.astype("<u4").tobytes(), 4 * page_size, num_pages)
    else:
        pages = _mixed_pages(units, tokens.reshape(num_pages, page_size))
    # The hot loop: one SHA-256 per page over (prior digest || page bytes). Slices are made
    # up front and results joined once, so each page costs one concatenation and one hash.
    sha256 = hashlib.sha256
    digests: list[bytes] = []
    append = digests.append
    it = iter(pages)
    if prior is None:
        prior = sha256(next(it)).digest()
        append(prior)
    for page in it:
        prior = sha256(prior + page).digest()
        append(prior)
    return b"".join(digests)


def _slices(data: bytes, step: int, num_pages: int) -> list[bytes]:
    return [data[a : a + step] for a in range(0, num_pages * step, step)]


def _mixed_pages(units: bytes, pages: np.ndarray) -> list[bytes]:
    """Page bytes when some unit does not fit uint32: those pages take the tagged wide
    encoding, the others stay narrow."""
    narrow = ((pages.min(axis=1) >= 0) & (pages.max(axis=1) <= _U32_MAX)).tolist()
    page_size = pages.shape[1]
    data, step = pages.astype("<u4").tobytes(), 4 * page_size
    wide_step = UNIT_BYTES * page_size
    return [
        data[p * step : (p + 1) * step]
        if is_narrow
        else _WIDE_TAG + units[p * wide_step : (p + 1) * wide_step]
        for p, is_narrow in enumerate(narrow)
    ]


def page_digests(
    units: bytes, page_size: int, prior: bytes | None = None, bigram: bool = False
) -> list[bytes]:
    """`chain_digests` as a list of 32-byte digests."""
    blob = chain_digests(units, page_size, prior, bigram)
    return [blob[a : a + DIGEST_BYTES] for a in range(0, len(blob), DIGEST_BYTES)]


def blob_int64s(blob: bytes) -> np.ndarray:
    """The published hash (`digest_to_int64`) of every digest in a `chain_digests` blob,
    as one int64 array (a view: no per-page Python work)."""
    return np.frombuffer(blob, dtype=">i8")[:: DIGEST_BYTES // 8]


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
