"""What the L3 fault soak watches from outside the library: every page written and read back
(wrong data), how long each store call and each wait on the server took, and the lines L3
printed.

- `StoreWatch(backend)` wraps a backend's public calls on that instance: each payload handed
  to `batch_set_outcome` is recorded (an 8-byte digest) under its key name before the call,
  and each page `batch_get` returns must equal one of the payloads recorded under its key,
  else it is wrong data (a page may be written more than once, with other bytes: any of
  them is right). It times each call too (the store's part: digests not included), and
  counts the calls past `limit_s`.
- `TimedConnection`, a redis-py connection class: times each socket connect and each wait
  for a reply, the waits the client's `socket_timeout` / `socket_connect_timeout` bound.
- `NoticeCounter`, a logging handler: counts the lines L3 prints (`uniradix.storage`).
- `StallMeter`, a thread that sleeps 10 ms at a time and notes how late it wakes: how long
  the process could not run at all (a loaded machine), the floor under every call's time.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from uniradix.hashing.storage_keys import PageKey
from uniradix.storage.backend import StorageBackend
from uniradix.storage.page_format import Miss, MissReason, Payload
from uniradix.storage.redis_deadline import BoundedConnection


def _digest(data: Payload) -> bytes:
    return hashlib.blake2b(data, digest_size=8).digest()


class Longest:
    """The longest duration seen per name (thread-safe); with a `limit_s`, how many were
    seen (`count`) and how many went past it (`over`)."""

    def __init__(self, limit_s: float | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self.limit_s = limit_s
        self.over: dict[str, int] = {}
        self.count: dict[str, int] = {}
        self._lock = threading.Lock()

    def note(self, name: str, seconds: float) -> None:
        if self.limit_s is not None:
            with self._lock:
                self.count[name] = self.count.get(name, 0) + 1
                if seconds > self.limit_s:
                    self.over[name] = self.over.get(name, 0) + 1
        if seconds > self.seconds.get(name, 0.0):
            with self._lock:
                self.seconds[name] = max(seconds, self.seconds.get(name, 0.0))


class StoreWatch:
    def __init__(self, backend: StorageBackend, limit_s: float | None = None) -> None:
        self.backend = backend
        # Key name -> its payload's digest, or the set of them when it was written with
        # other bytes too (a Mamba state saved again from another host slot).
        self.written: dict[str, bytes | set[bytes]] = {}
        self.pages_checked = 0
        self.wrong_data = 0
        self.wrong_examples: list[str] = []
        self.calls = Longest(limit_s)
        self._lock = threading.Lock()
        get, put, exists = backend.batch_get, backend.batch_set_outcome, backend.batch_exists
        # Timed inside the checks: the store's own time, not the watch's digests.
        backend.batch_get = self._checked(self._timed("batch_get", get))  # type: ignore[method-assign]
        backend.batch_set_outcome = self._recorded(self._timed("batch_set", put))  # type: ignore[method-assign]
        backend.batch_exists = self._timed("batch_exists", exists)  # type: ignore[method-assign]

    def _timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.calls.note(name, time.perf_counter() - t0)

        return timed

    def _recorded(
        self, put: Callable[[Sequence[PageKey], Sequence[Payload]], tuple[int, MissReason | None]]
    ) -> Callable[[Sequence[PageKey], Sequence[Payload]], tuple[int, MissReason | None]]:
        def recorded(
            keys: Sequence[PageKey], payloads: Sequence[Payload]
        ) -> tuple[int, MissReason | None]:
            digests = [_digest(p) for p in payloads]
            with self._lock:
                for key, digest in zip(keys, digests, strict=False):
                    known = self.written.get(key.name)
                    if known is None:
                        self.written[key.name] = digest
                    elif isinstance(known, set):
                        known.add(digest)
                    elif known != digest:
                        self.written[key.name] = {known, digest}
            return put(keys, payloads)

        return recorded

    def _checked(
        self, get: Callable[..., list[memoryview | Miss]]
    ) -> Callable[..., list[memoryview | Miss]]:
        def checked(keys: Sequence[PageKey], *args: Any) -> list[memoryview | Miss]:
            pages = get(keys, *args)
            with self._lock:
                for key, page in zip(keys, pages, strict=True):
                    if isinstance(page, Miss):
                        continue
                    self.pages_checked += 1
                    known = self.written.get(key.name)
                    digest = _digest(page)
                    if digest != known and not (isinstance(known, set) and digest in known):
                        self.wrong_data += 1
                        if len(self.wrong_examples) < 5:
                            self.wrong_examples.append(f"{key.name}: {bytes(page[:16]).hex()}")
            return pages

        return checked


class TimedConnection(BoundedConnection):
    """A redis-py connection that notes its longest connect and reply wait in `waits` (and
    counts those past `waits.limit_s`, when the caller sets one)."""

    waits = Longest()

    def _connect(self) -> Any:
        t0 = time.perf_counter()
        try:
            return super()._connect()
        finally:
            self.waits.note("connect", time.perf_counter() - t0)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return super().read_response(*args, **kwargs)
        finally:
            self.waits.note("reply", time.perf_counter() - t0)


class NoticeCounter(logging.Handler):
    """Counts L3's lines by their first words (`uniradix: L3 store X is off` -> "is off");
    while installed they are counted, not printed."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}
        self.first: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.first = self.first or message
        for words in ("failed", "is off", "still fails", "is back on", "refused a write"):
            if f" {words} " in message or message.endswith(f" {words}"):
                self.counts[words] = self.counts.get(words, 0) + 1
                return
        self.counts["other"] = self.counts.get("other", 0) + 1

    def __enter__(self) -> NoticeCounter:
        log = logging.getLogger("uniradix.storage")
        log.addHandler(self)
        log.propagate = False
        return self

    def __exit__(self, *exc: object) -> None:
        log = logging.getLogger("uniradix.storage")
        log.removeHandler(self)
        log.propagate = True


class StallMeter:
    """Sleeps `tick_s` at a time on its own thread; `longest_s` is the latest wake-up seen
    (beyond the tick), `stalls` how many came later than `limit_s`."""

    def __init__(self, tick_s: float = 0.01, limit_s: float = 0.05) -> None:
        self.tick_s, self.limit_s = tick_s, limit_s
        self.longest_s = 0.0
        self.stalls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-meter", daemon=True)

    def __enter__(self) -> StallMeter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            t0 = time.perf_counter()
            if self._stop.wait(self.tick_s):
                return
            late = time.perf_counter() - t0 - self.tick_s
            self.longest_s = max(self.longest_s, late)
            self.stalls += late > self.limit_s
