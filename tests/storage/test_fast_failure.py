"""A store that fails costs little and says so: no retries once L3 is off, backups paused
after a refused write, one stderr line per change, and counters of what was skipped."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from uniradix.key import RadixKey
from uniradix.storage import CircuitBreaker, KeySpace, backend, open_backend
from uniradix.storage.file_backend import FileBackend
from uniradix.storage.io import BackupWriter
from uniradix.storage.page_format import Payload

KS = KeySpace("org/m@rev1", "bfloat16", "layer_first", 2, "full")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class DownStore(FileBackend):
    """Every write raises while `down`; counts the writes that reached the store."""

    def __init__(self, directory: Path, breaker: CircuitBreaker) -> None:
        super().__init__(directory, breaker=breaker)
        self.down, self.calls = True, 0

    def _store_set(self, names: list[str], headers: list[bytes], payloads: list[Payload]) -> int:
        self.calls += 1
        if self.down:
            raise ConnectionRefusedError(111, "Connection refused")
        return super()._store_set(names, headers, payloads)


class FullStore(FileBackend):
    """Refuses every write without failing, as a full Redis under `noeviction` does."""

    calls = 0

    def _store_set(self, names: list[str], headers: list[bytes], payloads: list[Payload]) -> int:
        self.calls += 1
        self._note_refusal("OOM command not allowed when used memory > 'maxmemory'")
        return 0


def chain(num_pages: int, start: int) -> tuple[list, list[bytes]]:  # type: ignore[type-arg]
    keys = KS.keys_for(RadixKey(list(range(start, start + 2 * num_pages))))
    return keys, [b"x" * 64] * num_pages


def l3_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "uniradix.storage"]


def test_once_off_the_writer_makes_no_call_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    store = DownStore(tmp_path, CircuitBreaker(failure_threshold=2, cooldown_s=1.0, clock=clock))
    store.label = "file://test-store"
    writer = BackupWriter(store, max_retries=3, retry_delay_s=0.0)
    with caplog.at_level(logging.WARNING, logger="uniradix.storage"):
        for i in range(20):
            writer.submit(*chain(4, 100 * i))
        writer.flush()
        results = sorted(writer.poll(), key=lambda r: r.ticket)
        # Two failed calls opened the breaker; the other 19 chains cost no call at all.
        assert store.calls == 2
        assert [r.attempts for r in results] == [2] + [0] * 19
        assert all(r.stored_pages == 0 for r in results)
        stats = store.stats()
        assert stats.breaker_state == "open" and stats.failed_ops == 2
        assert stats.last_error == "ConnectionRefusedError: [Errno 111] Connection refused"
        lines = l3_lines(caplog)
        assert len(lines) == 2
        assert "file://test-store failed (ConnectionRefusedError" in lines[0]
        assert "file://test-store is off" in lines[1] and "next try in 1.0 s" in lines[1]
        # The probe fails: still off, twice as long; then it succeeds: back on.
        clock.now = 1.0
        store.down = True
        writer.submit(*chain(4, 5000))
        writer.flush()
        assert "still fails" in l3_lines(caplog)[2] and "next try in 2.0 s" in l3_lines(caplog)[2]
        clock.now = 2.5
        assert not store.available()
        clock.now = 3.0
        store.down = False
        writer.submit(*chain(4, 6000))
        writer.flush()
        assert writer.poll()[-1].complete
        assert "is back on after 3.0 s off" in l3_lines(caplog)[3]
        assert len(l3_lines(caplog)) == 4
    stats = store.stats()
    assert stats.off_s == 3.0 and stats.breaker_trips == 1 and stats.pages_written == 4
    writer.close()


def test_a_refused_write_pauses_backups(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = FullStore(tmp_path)
    writer = BackupWriter(store)
    with caplog.at_level(logging.WARNING, logger="uniradix.storage"):
        for i in range(10):
            writer.submit(*chain(4, 100 * i))
        writer.flush()
    results = writer.poll()
    assert store.calls == 1 and sum(r.attempts for r in results) == 1
    assert not store.writable() and store.available()  # reads go on
    (line,) = l3_lines(caplog)
    assert "refused a write (OOM command not allowed" in line and "backups paused" in line
    writer.close()


def test_refused_calls_are_counted_and_the_label_hides_the_password() -> None:
    store = open_backend("redis://:s3cret@127.0.0.1:1/0?timeout_s=0.2&breaker_failures=1")
    assert store.label == "redis://:***@127.0.0.1:1/0"
    keys, _ = chain(8, 0)
    assert store.batch_exists(keys) == 0  # fails: the breaker opens
    assert store.batch_exists(keys) == 0  # refused at once
    assert store.batch_get(keys) != []
    stats = store.stats()
    assert stats.failed_ops == 1 and stats.pages_refused == 16
    assert "s3cret" not in str(stats)
    store.close()


def test_rediss_urls_connect_over_tls() -> None:
    store = open_backend("rediss://:pw@127.0.0.1:1/0")
    assert store._client_kwargs["ssl"] is True and store._client_kwargs["password"] == "pw"  # type: ignore[attr-defined]
    assert store.label == "rediss://:***@127.0.0.1:1/0"
    store.close()


class FillingStore(FileBackend):
    """Refuses every write while `full`, as a Redis under `noeviction` does."""

    full = True

    def _store_set(self, names: list[str], headers: list[bytes], payloads: list[Payload]) -> int:
        if self.full:
            self._note_refusal("OOM command not allowed when used memory > 'maxmemory'")
            return 0
        return super()._store_set(names, headers, payloads)


def test_the_write_pause_starts_over_once_writes_succeed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    monkeypatch.setattr(backend, "time", SimpleNamespace(monotonic=clock))
    store = FillingStore(tmp_path)
    with caplog.at_level(logging.WARNING, logger="uniradix.storage"):
        store.batch_set(*chain(2, 0))  # refused: paused 1 s
        clock.now = 1.5
        store.batch_set(*chain(2, 0))  # refused again: 2 s
        clock.now, store.full = 4.0, False
        assert store.writable() and store.batch_set(*chain(2, 0)) == 2
        clock.now, store.full = 100.0, True
        store.batch_set(*chain(2, 100))  # a new outage: 1 s again (it used to be 4 s)
    pauses = [line.split("paused for ")[1] for line in l3_lines(caplog) if "paused" in line]
    assert [p.split(" s,")[0] for p in pauses] == ["1.0", "2.0", "1.0"]
    store.close()
