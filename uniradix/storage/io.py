"""Background L3 I/O the host tier drives: a backup writer and a prefetcher (no tree here).

**Backup.** `BackupWriter.submit(keys, payloads)` queues one node chain's pages (the host
tier keeps them pinned); a worker thread writes them in batches, and
`poll()` reports each ticket once with the *contiguous* prefix that is stored: pages after a
hole are not counted, so a partial write is never taken for a backup. Only a store error
is retried (a few times, with a short doubling sleep), and only while the breaker lets calls
through: once L3 is off or backups are paused (`StorageBackend.writable`) a job ends at
once, costing nothing, and so does one the store refused (full).

**Prefetch.** `Prefetcher.probe(keys)` asks the store how long the stored prefix is;
`start(keys[:hit], ...)` fetches it on a worker thread, batch by batch, stopping at the
first page that does not arrive or verify. The scheduler asks `can_finish(handle)`:

- `best_effort`: always (take whatever arrived);
- `wait_complete`: once the fetch ended (it always ends: every store call is bounded by
  the backend's timeouts and its circuit breaker, so a dead store cannot hang a request);
- `timeout`: once it ended or `base_s + per_ki_token_s * num_tokens / 1024` (capped at
  `max_s`) passed since `start`.

`finish(handle)` stops the fetch and hands over the arrived prefix; `cancel(handle)` (an
aborted request) stops it and drops everything. Either way the handle's pages leave
`pages_in_flight` at once, and whatever the worker was still reading is discarded.
Worker threads never die: an unexpected exception ends that job and is reported.
"""

from __future__ import annotations

import enum
import itertools
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from uniradix.hashing.storage_keys import PageKey
from uniradix.storage.backend import StorageBackend
from uniradix.storage.page_format import MissReason, Payload

BATCH_PAGES = 128  # pages per store call: progress survives a failure part-way


@dataclass(frozen=True, slots=True)
class BackupResult:
    """`stored_pages` leading pages of the chain are in L3 (all of them when `complete`)."""

    ticket: int
    num_pages: int
    stored_pages: int
    attempts: int
    error: str | None = None  # an unexpected exception that ended the job

    @property
    def complete(self) -> bool:
        return self.stored_pages == self.num_pages


class BackupWriter:
    def __init__(
        self,
        backend: StorageBackend,
        max_retries: int = 3,
        retry_delay_s: float = 0.01,
        max_queued: int = 4096,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.backend = backend
        self.max_retries = max_retries
        self.retry_delay_s = retry_delay_s
        self._jobs: queue.Queue[tuple[int, list[PageKey], list[Payload]] | None] = queue.Queue(
            max_queued
        )
        self._results: queue.SimpleQueue[BackupResult] = queue.SimpleQueue()
        self._tickets = itertools.count()
        self._pending = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._thread = threading.Thread(target=self._run, name="uniradix-l3-backup", daemon=True)
        self._thread.start()

    def submit(self, keys: Sequence[PageKey], payloads: Sequence[Payload]) -> int | None:
        """Queues one chain; its ticket, or None when the queue is full (nothing queued:
        the caller keeps the pages as not backed up). Never blocks."""
        if len(keys) != len(payloads):
            raise ValueError(f"submit: {len(keys)} keys but {len(payloads)} payloads")
        ticket = next(self._tickets)
        with self._lock:
            try:
                self._jobs.put_nowait((ticket, list(keys), list(payloads)))
            except queue.Full:
                return None
            self._pending += 1
        return ticket

    def poll(self) -> list[BackupResult]:
        """Results of finished chains since the last poll, each ticket exactly once."""
        out: list[BackupResult] = []
        while True:
            try:
                out.append(self._results.get_nowait())
            except queue.Empty:
                return out

    def flush(self, timeout_s: float | None = None) -> bool:
        """Waits until every queued chain is finished; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout_s)

    def close(self) -> None:
        """Finishes the queued chains, then stops the thread."""
        self._jobs.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            ticket, keys, payloads = job
            stored, attempts, error = 0, 0, None
            try:
                stored, attempts = self._write(keys, payloads)
            except Exception as exc:  # a bug must not kill the thread and strand the queue
                error = f"{type(exc).__name__}: {exc}"
            self._results.put(BackupResult(ticket, len(keys), stored, attempts, error))
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def _write(self, keys: list[PageKey], payloads: list[Payload]) -> tuple[int, int]:
        stored = attempts = failures = 0
        while stored < len(keys) and self.backend.writable():
            end = min(stored + BATCH_PAGES, len(keys))
            attempts += 1
            n, why = self.backend.batch_set_outcome(keys[stored:end], payloads[stored:end])
            stored += n
            if stored < end:
                failures += 1
                retry = why is MissReason.BACKEND_ERROR and self.backend.available()
                if not retry or failures > self.max_retries:
                    break
                time.sleep(self.retry_delay_s * (1 << (failures - 1)))
        return stored, attempts


class PrefetchPolicy(enum.Enum):
    BEST_EFFORT = "best_effort"
    WAIT_COMPLETE = "wait_complete"
    TIMEOUT = "timeout"


@dataclass(frozen=True, slots=True)
class PrefetchTimeout:
    """The `timeout` policy's deadline; defaults are the reference system's."""

    base_s: float = 2.0
    per_ki_token_s: float = 0.1
    max_s: float = 30.0

    def deadline_s(self, num_tokens: int) -> float:
        return min(self.base_s + self.per_ki_token_s * num_tokens / 1024, self.max_s)


class PrefetchHandle:
    """One request's fetch. Read `arrived_pages` and `done` any time; hand it back to the
    `Prefetcher` exactly once (`finish` or `cancel`)."""

    def __init__(
        self, keys: list[PageKey], num_tokens: int, expected_bytes: int | None, deadline: float
    ) -> None:
        self.keys = keys
        self.num_tokens = num_tokens
        self.expected_bytes = expected_bytes
        self.deadline = deadline
        self._pages: list[memoryview] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.released = False
        self.error: str | None = None

    @property
    def arrived_pages(self) -> int:
        with self._lock:
            return len(self._pages)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _append(self, pages: list[memoryview]) -> bool:
        """Adds arrived pages unless the handle was released; False to stop fetching."""
        with self._lock:
            if self.released:
                return False
            self._pages.extend(pages)
            return True

    def _release(self) -> list[memoryview]:
        with self._lock:
            if self.released:
                raise ValueError("prefetch handle already finished or cancelled")
            self.released = True
            pages, self._pages = self._pages, []
            return pages


class Prefetcher:
    def __init__(
        self,
        backend: StorageBackend,
        policy: PrefetchPolicy = PrefetchPolicy.BEST_EFFORT,
        timeout: PrefetchTimeout | None = None,
        num_workers: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.backend = backend
        self.policy = policy
        self.timeout = timeout or PrefetchTimeout()
        self._clock = clock
        self._queue: queue.SimpleQueue[PrefetchHandle | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.pages_in_flight = 0
        self.handles_in_flight = 0
        self._workers = [
            threading.Thread(target=self._run, name=f"uniradix-l3-prefetch-{i}", daemon=True)
            for i in range(num_workers)
        ]
        for worker in self._workers:
            worker.start()

    def probe(self, keys: Sequence[PageKey]) -> int:
        """Stored prefix length of `keys`, in pages (bounded by the backend's timeouts)."""
        return self.backend.batch_exists(keys)

    def start(
        self, keys: Sequence[PageKey], num_tokens: int, expected_bytes: int | None = None
    ) -> PrefetchHandle:
        """Starts fetching `keys` (usually `keys[:probe(keys)]`); `num_tokens` sets the
        `timeout` policy's deadline. Returns at once."""
        handle = PrefetchHandle(
            list(keys),
            num_tokens,
            expected_bytes,
            self._clock() + self.timeout.deadline_s(num_tokens),
        )
        with self._lock:
            self.pages_in_flight += len(handle.keys)
            self.handles_in_flight += 1
        self._queue.put(handle)
        return handle

    def can_finish(self, handle: PrefetchHandle) -> bool:
        """Whether the policy lets the scheduler stop waiting for `handle` now."""
        if handle.done or self.policy is PrefetchPolicy.BEST_EFFORT:
            return True
        if self.policy is PrefetchPolicy.WAIT_COMPLETE:
            return False
        return self._clock() >= handle.deadline

    def wait(self, handle: PrefetchHandle, complete: bool = False) -> None:
        """Blocks until `can_finish(handle)` (at once under `best_effort`), or until the
        fetch ended when `complete`."""
        if complete or self.policy is PrefetchPolicy.WAIT_COMPLETE:
            handle._done.wait()
        elif self.policy is PrefetchPolicy.TIMEOUT:
            handle._done.wait(max(0.0, handle.deadline - self._clock()))

    def finish(self, handle: PrefetchHandle) -> list[memoryview]:
        """Stops the fetch and returns the pages that arrived (a prefix of the keys)."""
        pages = handle._release()
        self._untrack(handle)
        return pages

    def cancel(self, handle: PrefetchHandle) -> None:
        """Aborts the fetch and drops whatever arrived (an aborted request)."""
        handle._release()
        self._untrack(handle)

    def close(self) -> None:
        for _ in self._workers:
            self._queue.put(None)
        for worker in self._workers:
            worker.join()

    def _untrack(self, handle: PrefetchHandle) -> None:
        with self._lock:
            self.pages_in_flight -= len(handle.keys)
            self.handles_in_flight -= 1

    def _run(self) -> None:
        while (handle := self._queue.get()) is not None:
            try:
                self._fetch(handle)
            except Exception as exc:  # a bug must not kill the worker
                handle.error = f"{type(exc).__name__}: {exc}"
            handle._done.set()

    def _fetch(self, handle: PrefetchHandle) -> None:
        for start in range(0, len(handle.keys), BATCH_PAGES):
            if handle.released:
                return
            batch = handle.keys[start : start + BATCH_PAGES]
            got = self.backend.batch_get(batch, handle.expected_bytes)
            arrived: list[memoryview] = []
            for page in got:
                if not isinstance(page, memoryview):
                    break
                arrived.append(page)
            if not handle._append(arrived) or len(arrived) < len(batch):
                return
