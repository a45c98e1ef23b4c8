"""The file store: byte cap with LRU eviction, index rebuilt at start, temp-file clean-up,
failures as counted misses, and crash safety (a writer stopped at any point of the write
path leaves only whole pages)."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.storage.conftest import du
from uniradix.key import RadixKey
from uniradix.storage import KeySpace, Miss, MissReason, open_backend, register_backend
from uniradix.storage.backend import StorageBackend
from uniradix.storage.file_backend import FileBackend, parse_bytes
from uniradix.storage.page_format import HEADER_BYTES

KS = KeySpace("org/m@rev1", "bfloat16", "layer_first", 1, "full")
PAGE = 1000
FILE_BYTES = HEADER_BYTES + PAGE


def keys(n: int, start: int = 0) -> list[Any]:
    return KS.keys_for(RadixKey(list(range(start, start + n))))


def data(i: int) -> bytes:
    return bytes([i % 256]) * PAGE


def spread_keys(n: int) -> list[Any]:
    """`n` keys in `n` different shard folders, so each page costs one page block plus one
    folder block and the cap tests can count pages exactly."""
    out, shards = [], set()
    for k in keys(1000):
        if k.name[-64:-62] not in shards:
            shards.add(k.name[-64:-62])
            out.append(k)
    assert len(out) >= n
    return out[:n]


def capped(directory: Path, pages: int, empty: int | None = None) -> FileBackend:
    """A store whose cap holds exactly `pages` of `spread_keys` (a page and its folder)
    besides `empty`, the store's own folders (measured here if not given)."""
    empty = FileBackend(directory).used_bytes if empty is None else empty
    return FileBackend(directory, max_bytes=empty + pages * page_cost(directory))


def page_cost(directory: Path) -> int:
    return 2 * FileBackend(directory).block_bytes


def test_cap_is_never_exceeded_and_eviction_is_lru(tmp_path: Path) -> None:
    store = capped(tmp_path, 10)
    assert store.max_bytes is not None
    ks = spread_keys(60)
    rng = random.Random(0)
    hot = ks[0]
    store.batch_set([hot], [data(0)])
    i = 1
    while i < 60:
        n = min(rng.randint(1, 4), 60 - i)
        store.batch_set(ks[i : i + n], [data(j) for j in range(i, i + n)])
        i += n
        store.batch_get([hot])  # keep one page hot: LRU must spare it
        assert store.used_bytes == du(tmp_path) <= store.max_bytes
    assert isinstance(store.batch_get([hot])[0], memoryview)
    assert store.stats().pages_evicted == 60 - 10
    # The newest 9 pages stayed (the tenth slot is the hot page's).
    assert store.batch_exists(ks[51:]) == 9 and store.batch_exists(ks[50:51]) == 0


def test_many_small_pages_stay_under_the_cap_by_du(tmp_path: Path) -> None:
    # The case: 72-byte simulation pages; a 100K cap once used 6.7 MB of disk.
    store = FileBackend(tmp_path, max_bytes=100_000)
    ks = keys(600)
    for i in range(0, 600, 50):
        assert store.batch_set(ks[i : i + 50], [bytes([j % 256]) * 8 for j in range(50)]) > 0
        assert store.used_bytes == du(tmp_path) <= 100_000
    assert store.stats().pages_evicted > 0 and store.batch_exists(ks[-1:]) == 1


def test_page_larger_than_the_cap_is_refused(tmp_path: Path) -> None:
    empty = FileBackend(tmp_path).used_bytes
    store = FileBackend(tmp_path, max_bytes=empty + page_cost(tmp_path) - 1)
    assert store.batch_set(spread_keys(1), [data(0)]) == 0
    assert du(tmp_path) == empty and store.stats().failed_ops == 0


def test_index_is_rebuilt_oldest_first(tmp_path: Path) -> None:
    first = FileBackend(tmp_path)
    empty = first.used_bytes
    ks = spread_keys(6)
    first.batch_set(ks, [data(i) for i in range(6)])
    for i, k in enumerate(ks):  # make page 3 the oldest on disk
        os.utime(first._path(k.name), (1000 + (0 if i == 3 else i + 10),) * 2)
    second = capped(tmp_path, 5, empty)  # start-up evicts one page
    assert second.stats().pages_evicted == 1
    assert [isinstance(p, Miss) for p in second.batch_get(ks)] == [False] * 3 + [True] + [False] * 2
    assert second.used_bytes == du(tmp_path)


def test_page_written_by_another_process_is_adopted(tmp_path: Path) -> None:
    reader, writer = FileBackend(tmp_path), FileBackend(tmp_path)
    ks = spread_keys(3)
    writer.batch_set(ks, [data(i) for i in range(3)])
    assert reader.batch_exists(ks) == 3  # not in its index at start: found by path
    assert reader.used_bytes == writer.used_bytes == du(tmp_path)


def test_stale_temp_files_are_removed_at_start(tmp_path: Path) -> None:
    FileBackend(tmp_path)
    stale, fresh = tmp_path / "tmp" / "a.tmp", tmp_path / "tmp" / "b.tmp"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"x")
    os.utime(stale, (time.time() - 3600,) * 2)
    FileBackend(tmp_path)
    assert not stale.exists() and fresh.exists()


def test_unremovable_file_does_not_block_eviction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = capped(tmp_path, 3)
    assert store.max_bytes is not None
    ks = spread_keys(8)
    store.batch_set(ks[:3], [data(i) for i in range(3)])
    stuck = store._path(ks[0].name)
    real_unlink = Path.unlink

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if self == stuck:
            raise PermissionError(f"cannot remove {self}")
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    assert store.batch_set(ks[3:8], [data(i) for i in range(3, 8)]) == 5
    # The stuck page and its folder are still counted, and the cap holds by `du`.
    assert stuck.exists() and store.used_bytes == du(tmp_path) == store.max_bytes
    assert store.batch_exists(ks[6:8]) == 2 and store.batch_exists(ks[5:6]) == 0


def test_disk_errors_are_counted_failures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileBackend(tmp_path)
    ks = keys(4)
    real_open = os.open

    def full_disk(path: Any, flags: int, mode: int = 0o777) -> int:
        if str(path).endswith(".tmp"):
            raise OSError(28, "No space left on device")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", full_disk)
    assert store.batch_set(ks, [data(i) for i in range(4)]) == 0
    monkeypatch.undo()
    assert list((tmp_path / "tmp").iterdir()) == []  # a failed write leaves nothing
    s = store.stats()
    assert s.failed_ops == 1 and s.pages_written == 0
    assert store.batch_set(ks, [data(i) for i in range(4)]) == 4


def test_urls_and_the_registry(tmp_path: Path) -> None:
    store = open_backend("file")  # no path: a temporary directory, removed at close
    assert isinstance(store, FileBackend) and store.directory.exists()
    store.close()
    assert not store.directory.exists()
    capped = open_backend(f"file://{tmp_path}?max_bytes=1M&fsync=1&breaker_failures=5")
    assert isinstance(capped, FileBackend)
    assert (capped.max_bytes, capped.fsync, capped.breaker.failure_threshold) == (1 << 20, True, 5)
    assert capped.batch_set(keys(2), [data(0), data(1)]) == 2  # the fsync path
    assert parse_bytes("2G") == 2 << 30 and parse_bytes("4096") == 4096
    with pytest.raises(ValueError, match="unknown option"):
        open_backend(f"file://{tmp_path}?max_byte=1")
    with pytest.raises(ValueError, match="unknown storage backend 'nope'"):
        open_backend("nope://x")
    with pytest.raises(ValueError, match="not a byte size"):
        parse_bytes("lots")
    made: list[str] = []

    def factory(url: str) -> StorageBackend:
        made.append(url)
        return FileBackend(tmp_path / "custom")

    register_backend("mystore", factory)
    assert isinstance(open_backend("mystore://anything"), FileBackend)
    assert made == ["mystore://anything"]


class Crash(BaseException):
    """A simulated kill: not an Exception, so the writer's clean-up does not run."""


def _crash_points(file_bytes: int) -> list[tuple[str, int]]:
    offsets = sorted({file_bytes * i // 200 for i in range(200)} | {HEADER_BYTES, file_bytes})
    return [("open", 0), ("fsync", 0), ("close", 0), ("replace", 0), ("after_replace", 0)] + [
        ("writev", k) for k in offsets
    ]


def _inject(point: tuple[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    step, limit = point
    real: dict[str, Callable[..., Any]] = {
        name: getattr(os, name) for name in ("open", "writev", "fsync", "close", "replace")
    }
    if step == "writev":

        def writev(fd: int, buffers: list[memoryview]) -> int:
            os.write(fd, b"".join(bytes(b) for b in buffers)[:limit])
            raise Crash

        monkeypatch.setattr(os, "writev", writev)
    elif step == "after_replace":

        def replace(src: Any, dst: Any) -> None:
            real["replace"](src, dst)
            raise Crash

        monkeypatch.setattr(os, "replace", replace)
    else:

        def crash(*args: Any, **kwargs: Any) -> Any:
            if step == "open" and not str(args[0]).endswith(".tmp"):
                return real["open"](*args, **kwargs)
            raise Crash

        monkeypatch.setattr(os, step, crash)


def _check_only_whole_pages(directory: Path, written: list[tuple[Any, bytes]]) -> None:
    fresh = FileBackend(directory)  # what a restarted process sees
    pages = fresh.batch_get([k for k, _ in written], expected_bytes=PAGE)
    for (_, payload), page in zip(written, pages, strict=True):
        if isinstance(page, Miss):
            assert page.reason is MissReason.ABSENT
        else:
            assert bytes(page) == payload
    assert fresh.stats().pages_corrupt == 0


def test_writer_stopped_at_every_point_leaves_only_whole_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = _crash_points(FILE_BYTES)
    assert len(points) >= 200
    ks = keys(len(points))
    written: list[tuple[Any, bytes]] = []
    for i, point in enumerate(points):
        store = FileBackend(tmp_path, fsync=True)
        with monkeypatch.context() as m:
            _inject(point, m)
            with pytest.raises(Crash):
                store.batch_set([ks[i]], [data(i)])
        written.append((ks[i], data(i)))
        _check_only_whole_pages(tmp_path, written)
    published = FileBackend(tmp_path).batch_exists(ks[-1:])
    assert published == 0  # the last point crashed mid-write: not published
    # The leftovers of the crashed writers never block a later write of the same pages.
    again = FileBackend(tmp_path)
    assert again.batch_set(ks, [data(i) for i in range(len(ks))]) == len(ks)
    assert all(isinstance(p, memoryview) for p in again.batch_get(ks, expected_bytes=PAGE))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_writer_killed_at_random_times_leaves_only_whole_pages(tmp_path: Path) -> None:
    ks = keys(400)
    rng = random.Random(1)
    big = 256 * 1024  # large pages: a kill often lands inside a write
    for _ in range(20):
        pid = os.fork()
        if pid == 0:  # the writer: rewrite random pages until killed
            try:
                store = FileBackend(tmp_path)
                while True:
                    j = random.randrange(len(ks))
                    store.delete([ks[j]])
                    store.batch_set([ks[j]], [bytes([j % 256]) * big])
            finally:
                os._exit(0)
        time.sleep(rng.uniform(0.005, 0.05))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        fresh = FileBackend(tmp_path)
        pages = fresh.batch_get(ks, expected_bytes=big)
        for j, page in enumerate(pages):
            assert not isinstance(page, Miss) or page.reason is MissReason.ABSENT
            assert isinstance(page, Miss) or bytes(page[:1]) == bytes([j % 256])
        assert fresh.stats().pages_corrupt == 0


def test_two_stores_sharing_a_directory_evict_and_write_without_errors(tmp_path: Path) -> None:
    # Each evicts its pages and removes emptied shard folders while the other writes into
    # them (a publish retries when its folder vanishes): no failed write, no wrong page.
    ks = keys(400)
    stores = [FileBackend(tmp_path, max_bytes=120_000) for _ in range(2)]

    def writer(store: FileBackend, offset: int) -> None:
        for i in range(offset, 400, 20):
            store.batch_set(ks[i : i + 10], [bytes([j % 256]) * 8 for j in range(i, i + 10)])

    threads = [threading.Thread(target=writer, args=(s, 10 * n)) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [s.stats().failed_ops for s in stores] == [0, 0]
    pages = FileBackend(tmp_path).batch_get(ks, expected_bytes=8)
    assert any(isinstance(p, memoryview) for p in pages)
    for j, page in enumerate(pages):
        assert isinstance(page, Miss) or bytes(page) == bytes([j % 256]) * 8


def test_write_retries_when_its_shard_folder_is_removed_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process evicting the folder's last page removes the folder between this
    # writer's mkdir and its rename: the rename fails, the writer makes the folder again.
    store = FileBackend(tmp_path)
    k = keys(1)
    real_replace, removed = os.replace, []

    def replace(src: Any, dst: Any) -> None:
        if not removed:
            Path(dst).parent.rmdir()
            removed.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    assert store.batch_set(k, [data(0)]) == 1 and removed
    assert store.stats().failed_ops == 0 and store.used_bytes == du(tmp_path)
    page = store.batch_get(k)[0]
    assert isinstance(page, memoryview) and bytes(page) == data(0)
