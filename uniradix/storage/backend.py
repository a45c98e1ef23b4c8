"""The L3 backend interface, its counters, and the registry of backends by URL scheme.

One storage API: `batch_exists` (length of the stored prefix), `batch_get`, `batch_set`,
`delete`, `clear`, `stats`, `close`. `StorageBackend` implements it once for every store:
it frames each page (`page_format`), verifies every page read, counts everything, and runs
each store operation behind a `CircuitBreaker`, so a store that fails or is down gives
counted misses and never raises into the caller; its first failure and every change of
the breaker print one line (`notices`). A page that fails verification is deleted from the
store (self-repair): the next backup of that page writes it again. A concrete store (`file_backend`,
`redis_backend`) implements only the raw `_store_*` methods on names and bytes, and
declares which exceptions mean "the store failed" (`transient_errors`); any other exception
is a bug and propagates.

`open_backend("redis://host:6379/0?ttl_s=3600")` picks the backend by URL scheme;
`register_backend(scheme, factory)` adds one without touching the cache.
"""

from __future__ import annotations

import importlib
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import parse_qsl, urlsplit

from uniradix.hashing.storage_keys import PageKey
from uniradix.storage import notices
from uniradix.storage.breaker import BreakerState, CircuitBreaker
from uniradix.storage.page_format import (
    Miss,
    MissReason,
    Payload,
    decode,
    decode_parts,
    encode_header,
)

T = TypeVar("T")
StoredPage = Payload | tuple[Payload, Payload]
"""What a store read back: header and payload in one buffer, or (header, payload)."""

_REJECTED = frozenset(MissReason) - {
    MissReason.ABSENT,
    MissReason.BACKEND_ERROR,
    MissReason.BREAKER_OPEN,
}


@dataclass(frozen=True, slots=True)
class StorageStats:
    """Counters since the backend was opened (a snapshot). `pages_missed` counts every page
    asked for and not returned, whatever the reason (`misses_by_reason`); `pages_corrupt`
    those of them the page format rejected, `pages_repaired` those then deleted from the
    store; `pages_written` counts pages written, `pages_kept` pages a write found stored
    already; `failed_ops` store operations that raised; `pages_refused` pages of calls the
    breaker refused; `breaker_trips` times L3 was turned off, `off_s` seconds it was off;
    `last_error` the last failure's reason."""

    pages_written: int = 0
    bytes_written: int = 0
    pages_read: int = 0
    bytes_read: int = 0
    pages_missed: int = 0
    pages_corrupt: int = 0
    failed_ops: int = 0
    breaker_trips: int = 0
    breaker_state: str = BreakerState.CLOSED.value
    pages_evicted: int = 0
    pages_kept: int = 0
    pages_refused: int = 0
    pages_repaired: int = 0
    off_s: float = 0.0
    last_error: str | None = None
    misses_by_reason: dict[str, int] = field(default_factory=dict)


_COUNTERS = (
    "pages_written",
    "bytes_written",
    "pages_read",
    "bytes_read",
    "pages_missed",
    "pages_corrupt",
    "failed_ops",
    "pages_kept",
    "pages_refused",
    "pages_repaired",
)
WRITE_PAUSE_S = 1.0  # backups paused after the store refuses a write; doubles while it does
MAX_WRITE_PAUSE_S = 30.0


class StorageBackend(ABC):
    """A page store. Thread-safe: the backup writer and the prefetcher call it from their
    own threads while the scheduler probes it.

    Keys are `PageKey`s (`KeySpace.keys_for`); payloads are any contiguous buffer. A
    returned payload is a read-only view the caller may keep."""

    transient_errors: tuple[type[BaseException], ...] = (OSError,)

    def __init__(self, breaker: CircuitBreaker | None = None) -> None:
        self.breaker = breaker if breaker is not None else CircuitBreaker()
        self.breaker.on_change = self._breaker_changed
        self.label = type(self).__name__  # what notices call the store (`open_backend`: URL)
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(_COUNTERS, 0)
        self._misses = {reason: 0 for reason in MissReason}
        # Per store call: pages a write found stored (`kept`), bytes a read asks for
        # (`get_bytes`: `expected_bytes` per page).
        self._call = threading.local()
        self._pause_s = 0.0
        self._paused_until = 0.0

    # -- the store operations a backend implements -------------------------------------

    def _names(self, keys: Sequence[PageKey]) -> list[str]:
        """What the store names the pages by: their full names (hash tag included: a Redis
        Cluster places a page by it); a store that does not shard drops the tag."""
        return [k.name for k in keys]

    @abstractmethod
    def _store_exists_prefix(self, names: list[str]) -> int:
        """How many of `names`, from the first, are stored (stop at the first absent)."""

    @abstractmethod
    def _store_get(self, names: list[str]) -> list[StoredPage | None]:
        """The stored bytes of each name, None where absent."""

    @abstractmethod
    def _store_set(self, names: list[str], headers: list[bytes], payloads: list[Payload]) -> int:
        """Stores `header + payload` under each name, each page atomically (a reader sees the
        whole page or nothing), in order; returns how many leading pages are now stored. May
        skip pages it already holds (`_count_kept` each). A page the store refuses without
        failing (a full server) ends the prefix: `_note_refusal(why)`."""

    @abstractmethod
    def _store_delete(self, names: list[str]) -> int:
        """Removes the names; returns how many were there."""

    @abstractmethod
    def _store_clear(self) -> None:
        """Removes every page this backend wrote (and nothing else)."""

    @abstractmethod
    def _store_close(self) -> None:
        """Releases connections, files, temporary directories."""

    def _store_evicted_pages(self) -> int:
        return 0

    def _count_kept(self) -> None:
        """A `_store_set` found this page stored already and did not write it."""
        self._call.kept += 1

    def _note_refusal(self, reason: str) -> None:
        """The store refused a write without failing: backups pause (`writable`), for a
        time that doubles while refusals go on."""
        with self._lock:
            now = time.monotonic()
            if now < self._paused_until:
                return
            self._pause_s = min(max(self._pause_s * 2, WRITE_PAUSE_S), MAX_WRITE_PAUSE_S)
            self._paused_until = now + self._pause_s
            pause_s = self._pause_s
        notices.writes_paused(self.label, reason, pause_s)

    # -- the public interface ------------------------------------------------------------

    def available(self) -> bool:
        """Whether a store call would be tried now (False while L3 is off): callers skip
        preparing calls that would be refused."""
        return self.breaker.available()

    def writable(self) -> bool:
        """`available()`, and backups are not paused after a refused write."""
        return self.breaker.available() and time.monotonic() >= self._paused_until

    def batch_exists(self, keys: Sequence[PageKey]) -> int:
        """Length of the stored prefix of `keys` (0 when the store fails or L3 is off). A
        page found here may still be rejected by `batch_get` (corrupt, evicted meanwhile)."""
        if not keys:
            return 0
        result = self._guarded(lambda: self._store_exists_prefix(self._names(keys)), len(keys))
        return 0 if isinstance(result, MissReason) else result

    def batch_get(
        self, keys: Sequence[PageKey], expected_bytes: int | None = None
    ) -> list[memoryview | Miss]:
        """Each page's payload, or the `Miss` saying why not. `expected_bytes` is the payload
        size the caller needs (a page of another size is a `BAD_LENGTH` miss)."""
        if not keys:
            return []
        # The bytes this call asks for, for stores whose calls have deadlines (Redis).
        self._call.get_bytes = (expected_bytes or 0) * len(keys)
        names = self._names(keys)
        blobs = self._guarded(lambda: self._store_get(names), len(keys))
        if isinstance(blobs, MissReason):
            self._count_misses({blobs: len(keys)})
            return [Miss(blobs)] * len(keys)
        out: list[memoryview | Miss] = []
        misses: dict[MissReason, int] = {}
        rejected: list[str] = []
        num_bytes = 0
        for key, name, blob in zip(keys, names, blobs, strict=True):
            if blob is None:
                page: memoryview | Miss = Miss(MissReason.ABSENT)
            elif isinstance(blob, tuple):
                page = decode_parts(key, blob[0], blob[1], expected_bytes)
            else:
                page = decode(key, blob, expected_bytes)
            if isinstance(page, Miss):
                misses[page.reason] = misses.get(page.reason, 0) + 1
                if page.reason in _REJECTED:
                    rejected.append(name)
            else:
                num_bytes += page.nbytes
            out.append(page)
        with self._lock:
            self._counts["pages_read"] += len(keys) - sum(misses.values())
            self._counts["bytes_read"] += num_bytes
        self._count_misses(misses)
        if rejected:  # self-repair: gone now, the next backup of these pages rewrites them
            repaired = self._guarded(lambda: self._store_delete(rejected), len(rejected))
            if not isinstance(repaired, MissReason):
                with self._lock:
                    self._counts["pages_repaired"] += repaired
        return out

    def batch_set(self, keys: Sequence[PageKey], payloads: Sequence[Payload]) -> int:
        """Stores each payload under its key; returns how many leading pages are stored
        (a failure part-way is a shorter prefix, never an exception). Pages past the
        returned prefix may or may not be stored; each stored page is whole."""
        return self.batch_set_outcome(keys, payloads)[0]

    def batch_set_outcome(
        self, keys: Sequence[PageKey], payloads: Sequence[Payload]
    ) -> tuple[int, MissReason | None]:
        """`batch_set`, and why the prefix is short: `BACKEND_ERROR` (the store failed:
        worth a retry while `available()`), `BREAKER_OPEN` (refused, L3 is off), or None
        (every page stored, or the store refused one without failing: a full server)."""
        if len(keys) != len(payloads):
            raise ValueError(f"batch_set: {len(keys)} keys but {len(payloads)} payloads")
        if not keys:
            return 0, None
        headers = [encode_header(k, p) for k, p in zip(keys, payloads, strict=True)]
        self._call.kept = 0
        num_stored = self._guarded(
            lambda: self._store_set(self._names(keys), headers, list(payloads)), len(keys)
        )
        if isinstance(num_stored, MissReason):
            return 0, num_stored
        kept = self._call.kept
        with self._lock:
            if num_stored == len(keys):  # room again: a later refusal pauses from 1 s
                self._pause_s = 0.0
            self._counts["pages_written"] += num_stored - kept
            self._counts["pages_kept"] += kept
            self._counts["bytes_written"] += sum(
                memoryview(p).nbytes for p in payloads[:num_stored]
            )
        return num_stored, None

    def delete(self, keys: Sequence[PageKey]) -> int:
        """Removes pages; returns how many were stored (0 when the store fails)."""
        result = self._guarded(lambda: self._store_delete(self._names(keys)))
        return 0 if isinstance(result, MissReason) else result

    def clear(self) -> bool:
        """Removes every page of this backend; False when the store failed."""
        return not isinstance(self._guarded(self._store_clear), MissReason)

    def close(self) -> None:
        self._store_close()

    def stats(self) -> StorageStats:
        with self._lock:
            counts = dict(self._counts)
            misses = {r.value: n for r, n in self._misses.items() if n}
        return StorageStats(
            **counts,
            breaker_trips=self.breaker.trips,
            breaker_state=self.breaker.state.value,
            off_s=round(self.breaker.off_s, 3),
            last_error=self.last_error,
            pages_evicted=self._store_evicted_pages(),
            misses_by_reason=misses,
        )

    # -- internals -------------------------------------------------------------------------

    def _guarded(self, op: Callable[[], T], num_pages: int = 0) -> T | MissReason:
        """Runs one store operation behind the breaker: its result, or why there is none."""
        if not self.breaker.allow():
            with self._lock:
                self._counts["pages_refused"] += num_pages
            return MissReason.BREAKER_OPEN
        try:
            result = op()
        except self.transient_errors as exc:
            reason = str(exc).splitlines()[0] if str(exc) else ""
            if isinstance(exc, OSError) and exc.errno is not None:  # not the temp file's path
                reason = f"[Errno {exc.errno}] {exc.strerror}"
            self.last_error = f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__
            with self._lock:
                self._counts["failed_ops"] += 1
                first = self._counts["failed_ops"] == 1
            if first:
                notices.first_failure(self.label, self.last_error, self.breaker.failure_threshold)
            self.breaker.record_failure()
            return MissReason.BACKEND_ERROR
        self.breaker.record_success()
        return result

    def _breaker_changed(self, old: BreakerState, new: BreakerState, wait_s: float) -> None:
        reason = self.last_error or "unknown"
        notices.transition(self.label, old, new, reason, wait_s, self.breaker.off_s)

    def _count_misses(self, misses: dict[MissReason, int]) -> None:
        with self._lock:
            for reason, n in misses.items():
                self._misses[reason] += n
                self._counts["pages_missed"] += n
                if reason in _REJECTED:
                    self._counts["pages_corrupt"] += n


BackendFactory = Callable[[str], StorageBackend]
_REGISTRY: dict[str, BackendFactory] = {}
# Built-in backends register themselves when their module is imported; importing them only
# on first use keeps redis-py out of processes that never open a Redis URL.
_BUILTIN = {
    "null": "uniradix.storage.null_backend",
    "file": "uniradix.storage.file_backend",
    "redis": "uniradix.storage.redis_backend",
    "rediss": "uniradix.storage.redis_backend",
    "redis+cluster": "uniradix.storage.redis_backend",
}


def register_backend(scheme: str, factory: BackendFactory) -> None:
    """Makes `open_backend(f"{scheme}://...")` call `factory(url)`."""
    if not scheme or not scheme.replace("+", "").replace("-", "").isalnum():
        raise ValueError(f"backend scheme must be alphanumeric (+ and - allowed), got {scheme!r}")
    _REGISTRY[scheme.lower()] = factory


def open_backend(url: str) -> StorageBackend:
    """The backend for `url` (`file://DIR`, `file` alone for a temporary directory,
    `redis://[:password@]host:port/db`, `rediss://` for TLS, `redis+cluster://host:port`,
    `null` for no L3, or a registered scheme)."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else url.lower()
    if scheme not in _REGISTRY and scheme in _BUILTIN:
        importlib.import_module(_BUILTIN[scheme])
    factory = _REGISTRY.get(scheme)
    if factory is None:
        known = sorted(set(_REGISTRY) | set(_BUILTIN))
        raise ValueError(
            f"unknown storage backend {scheme!r} in {notices.redact(url)!r}; known: {known}"
        )
    backend = factory(url)
    backend.label = notices.redact(url.split("?", 1)[0])
    return backend


def url_options(url: str, allowed: set[str]) -> dict[str, str]:
    """The `?name=value` options of `url`, rejecting names a backend does not know."""
    options = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} in {url!r}; allowed: {sorted(allowed)}")
    return options


def breaker_from_options(options: dict[str, str]) -> CircuitBreaker:
    """A breaker configured by the `breaker_failures` and `breaker_cooldown_s` options."""
    return CircuitBreaker(
        failure_threshold=int(options.get("breaker_failures", "3")),
        cooldown_s=float(options.get("breaker_cooldown_s", "1.0")),
    )


BREAKER_OPTIONS = {"breaker_failures", "breaker_cooldown_s"}
