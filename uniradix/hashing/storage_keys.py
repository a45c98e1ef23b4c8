"""Storage keys: a page's chained digest bound to everything that decides what its bytes mean.

A page digest (`uniradix.hashing.page`) names a token prefix. The bytes stored for it also
depend on the model's weights, the KV dtype, the memory layout, the page size and the pool
(full KV, SWA KV, Mamba state), so two caches that differ in any of these must never read
each other's pages (wrong KV reused across model revisions is a reported failure of
reference systems). A `KeySpace` holds those fields; its `fingerprint` is a 16-byte digest of
them, framed so no two field tuples share bytes. LoRA `extra_key` and cache salt enter one
step earlier, as the seed of the digest chain (`namespace_seed`).

The storage key is `ur2.<fingerprint hex>.<page digest hex>.{<tag>}`; the page header
repeats both digests, so a page copied under another key is still a miss. The `{tag}` is a
Redis Cluster hash tag: the first 4 bytes (hex) of the digest of the group's first page,
where a chain's pages are grouped by `group_pages` (page `i` is in group `i // 64`). A
cluster puts a key in the slot of its tag, so a batch of a chain's pages lands in a few
slots and each slot answers one multi-key command (`MGET`, `EXISTS`), while different
chains, and a chain's later groups, still spread over the shards. The tag is a function of
the chain alone (its digests from the root), so every reader finds what any writer wrote.
Stores that do not shard name a page without its tag (`PageKey.stem`: a file store keeps
reading the pages it held before the tag). Redis pages of version 1 (`ur1.`, no tag) are
not read: misses, written again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from uniradix.hashing.page import DIGEST_BYTES, namespace_seed, page_digests
from uniradix.key import RadixKey

KEY_PREFIX = "ur2"
FINGERPRINT_BYTES = 16
GROUP_PAGES = 64
TAG_BYTES = 4  # of the group's first digest: 2**32 tags over a cluster's 16,384 slots


def _frame(text: str) -> bytes:
    # Length-prefixed, so ("ab", "c") and ("a", "bc") frame differently.
    data = text.encode()
    return len(data).to_bytes(8, "little") + data


@dataclass(frozen=True, slots=True)
class KeySpace:
    """What the bytes of a stored page mean, besides its tokens.

    `model_fingerprint` is the user's string for the weights (model id + revision, e.g.
    `"Qwen/Qwen3-8B@9c3b1a7"`); `kv_dtype` (`"bfloat16"`), `layout` (`"layer_first"`),
    `page_size` (tokens per page) and `pool` (`"full"`, `"swa"`, `"mamba"`) complete it.
    `shard` names the slice of a page a process holds (a tensor-parallel rank, `"tp0of2"`);
    empty when one process holds whole pages. `group_pages`: how many consecutive pages of
    a chain share a hash tag (see the module).
    """

    model_fingerprint: str
    kv_dtype: str
    layout: str
    page_size: int
    pool: str
    shard: str = ""
    group_pages: int = GROUP_PAGES
    fingerprint: bytes = field(init=False, repr=False, compare=False)
    key_head: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.model_fingerprint:
            raise ValueError("model_fingerprint must be a non-empty string (model id + revision)")
        for name in ("kv_dtype", "layout", "pool"):
            if not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        if not isinstance(self.page_size, int) or self.page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {self.page_size!r}")
        if not isinstance(self.group_pages, int) or self.group_pages < 1:
            raise ValueError(f"group_pages must be an int >= 1, got {self.group_pages!r}")
        h = hashlib.blake2b(b"uniradix-keyspace-v1", digest_size=FINGERPRINT_BYTES)
        for text in (self.model_fingerprint, self.kv_dtype, self.layout, self.pool, self.shard):
            h.update(_frame(text))
        h.update(self.page_size.to_bytes(8, "little"))
        digest = h.digest()
        object.__setattr__(self, "fingerprint", digest)
        object.__setattr__(self, "key_head", f"{KEY_PREFIX}.{digest.hex()}.")

    def key(self, page_digest: bytes, group_digest: bytes) -> PageKey:
        """The storage key of one page, from its chained digest and the digest of its
        group's first page (itself for a group's first page)."""
        for digest in (page_digest, group_digest):
            if len(digest) != DIGEST_BYTES:
                raise ValueError(f"page digest must be {DIGEST_BYTES} bytes, got {len(digest)}")
        tag = f".{{{group_digest[:TAG_BYTES].hex()}}}"
        return PageKey(self.key_head + page_digest.hex() + tag, self.fingerprint, page_digest, tag)

    def keys(self, chain: list[bytes]) -> list[PageKey]:
        """The keys of a chain's pages from their digests, root first: `chain[0]` must be
        the digest of the chain's first page (the tags come from every `group_pages`-th)."""
        head, fp, size = self.key_head, self.fingerprint, self.group_pages
        out: list[PageKey] = []
        for start in range(0, len(chain), size):
            tag = f".{{{chain[start][:TAG_BYTES].hex()}}}"
            out += [PageKey(head + d.hex() + tag, fp, d, tag) for d in chain[start : start + size]]
        return out

    def same_pages(self, keys: Sequence[PageKey]) -> list[PageKey]:
        """The keys in this space of the pages `keys` name in another (same digests, same
        tags): an auxiliary pool's pages share their full pages' slots."""
        head, fp = self.key_head, self.fingerprint
        return [PageKey(head + k.digest.hex() + k.tag, fp, k.digest, k.tag) for k in keys]

    def keys_for(self, key: RadixKey, cache_salt: str | None = None) -> list[PageKey]:
        """Keys of every whole page of `key`, chained from the root of its namespace (its
        `extra_key` and `cache_salt`). A trailing partial page has no key."""
        seed = namespace_seed(key.extra_key, cache_salt)
        return self.keys(page_digests(key.units, self.page_size, seed, key.is_bigram))


class PageKey:
    """One stored page's identity: `name` is what backends store it under, ending in `tag`
    (its hash tag, `.{...}`; empty for names of another scheme); `fingerprint` and `digest`
    are repeated in the page header and checked on every read. Treat as immutable. A plain
    slotted class, not a frozen dataclass: a 128K-token prefix makes thousands of keys, and
    a frozen dataclass's `__init__` costs ~5x more."""

    __slots__ = ("digest", "fingerprint", "name", "tag")

    def __init__(self, name: str, fingerprint: bytes, digest: bytes, tag: str = "") -> None:
        self.name = name
        self.fingerprint = fingerprint
        self.digest = digest
        self.tag = tag

    @property
    def stem(self) -> str:
        """The name without its hash tag: what a store that does not shard names it by."""
        return self.name[: len(self.name) - len(self.tag)]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PageKey) and self.name == other.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"PageKey({self.name!r})"
