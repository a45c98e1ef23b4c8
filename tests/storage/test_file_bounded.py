"""The file store's calls are bounded: the index lock is never held across a disk call (a
probe answers while a writer is stuck in one), a write waits for another at most
`timeout_s`, and a call past its time stops starting disk work (a shorter prefix, misses)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from uniradix.key import RadixKey
from uniradix.storage import KeySpace, MissReason, open_backend
from uniradix.storage import file_disk as disk
from uniradix.storage.file_backend import FileBackend

KS = KeySpace("org/m@rev1", "bfloat16", "layer_first", 1, "full")
PAGE = 1000
JOIN_S = 60.0  # a liveness bound: a call that deadlocks fails here instead of hanging


def keys(n: int, start: int = 0) -> list[Any]:
    return KS.keys_for(RadixKey(list(range(start, start + n))))


class Stuck:
    """Wraps a disk call so that the next call (of the paths `when` picks) blocks until
    `release`: a disk that stalls, at a point the test chooses."""

    def __init__(self, call: Callable[..., Any], when: Callable[..., bool]) -> None:
        self.call, self.when = call, when
        self.entered, self.gate = threading.Event(), threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.gate.is_set() and self.when(*args):
            self.entered.set()
            self.gate.wait(JOIN_S)
        return self.call(*args, **kwargs)

    def release(self) -> None:
        self.gate.set()


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    return thread, out


def probe_while_stuck(store: FileBackend, stuck: Stuck, write: Callable[[], Any]) -> list[Any]:
    """Starts `write`, waits until it is inside the stuck disk call, then probes and reads
    the stored pages from another thread: they must answer before the disk call returns."""
    writer, written = in_thread(write)
    assert stuck.entered.wait(JOIN_S)
    ks = keys(4)
    reader, answers = in_thread(lambda: (store.batch_exists(ks), store.batch_get(ks, PAGE)))
    reader.join(JOIN_S)
    finished_while_stuck = not reader.is_alive()
    stuck.release()
    writer.join(JOIN_S)
    reader.join(JOIN_S)
    assert finished_while_stuck, "a probe waited for another thread's disk call"
    exists, pages = answers[0]
    assert exists == 4 and all(not isinstance(p, MissReason) and bytes(p) for p in pages)
    return written


def test_probe_does_not_wait_for_a_stalled_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileBackend(tmp_path)
    assert store.batch_set(keys(4), [b"a" * PAGE] * 4) == 4
    stuck = Stuck(disk.pwrite_all, lambda *args: True)
    monkeypatch.setattr(disk, "pwrite_all", stuck)
    written = probe_while_stuck(store, stuck, lambda: store.batch_set(keys(4, 100), [b"b"] * 4))
    assert written == [4] and store.batch_exists(keys(4, 100)) == 4


def test_probe_does_not_wait_for_an_eviction_unlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages of their own segments (2 blocks each, 3 reserved per write): 7 fit, and the
    # second of 3 more evicts the least recently used.
    empty = FileBackend(tmp_path / "s")
    cap = empty.used_bytes + 18 * empty.block_bytes
    store = FileBackend(tmp_path / "s", max_bytes=cap, timeout_s=JOIN_S)
    big = empty.block_bytes  # over a quarter of the segment size: a segment of its own
    assert store.batch_set(keys(4), [b"a" * big] * 4) == 4
    assert store.batch_set(keys(3, 50), [b"c" * big] * 3) == 3
    segments = str(tmp_path / "s" / "segments")
    stuck = Stuck(os.unlink, lambda path, *a: str(path).startswith(segments))
    monkeypatch.setattr(os, "unlink", stuck)
    # Writing more evicts the oldest segments: the pages of keys(4) are refreshed first so
    # the ones of keys(3, 50) go.
    store.batch_get(keys(4), big)

    def write() -> int:
        return store.batch_set(keys(3, 200), [b"d" * big] * 3)

    writer, written = in_thread(write)
    assert stuck.entered.wait(JOIN_S)
    reader, answers = in_thread(lambda: store.batch_exists(keys(4)))
    reader.join(JOIN_S)
    finished_while_stuck = not reader.is_alive()
    stuck.release()
    writer.join(JOIN_S)
    assert finished_while_stuck, "a probe waited for an eviction's unlink"
    assert answers == [4] and written == [3]
    assert store.used_bytes <= cap


def test_a_write_waits_for_another_at_most_its_timeout(tmp_path: Path) -> None:
    store = FileBackend(tmp_path, timeout_s=0.01)
    assert store._write_lock.acquire()  # another write that does not end
    try:
        assert store.batch_set(keys(2), [b"x" * PAGE] * 2) == 0
        assert not store.writable()  # backups pause, as after a full store's refusal
    finally:
        store._write_lock.release()
    assert store.stats().failed_ops == 0  # slow is not down: the breaker stays closed


def test_a_call_past_its_time_stops_starting_disk_work(tmp_path: Path) -> None:
    slow = FileBackend(tmp_path, timeout_s=1e-9)  # every call is past its time at once
    ks = keys(5)
    assert slow.batch_set(ks, [b"y" * PAGE] * 5) == 1  # one page always: progress
    fast = FileBackend(tmp_path)
    assert fast.batch_set(ks, [b"y" * PAGE] * 5) == 5
    pages = slow.batch_get(ks, PAGE)
    assert bytes(pages[0]) == b"y" * PAGE  # type: ignore[arg-type]
    assert all(getattr(p, "reason", None) is MissReason.ABSENT for p in pages[1:])
    assert fast.batch_get(ks, PAGE) and fast.stats().pages_corrupt == 0


def test_timeout_option_in_the_url(tmp_path: Path) -> None:
    store = open_backend(f"file://{tmp_path}?timeout_s=0.25")
    assert isinstance(store, FileBackend) and store.timeout_s == 0.25
    with pytest.raises(ValueError, match="timeout_s"):
        FileBackend(tmp_path, timeout_s=0)
