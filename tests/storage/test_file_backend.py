"""The file store: small pages packed into segments, the byte cap by `du` with LRU eviction of
segments, the index rebuilt at start, deletions and repairs that last, torn tails cut,
failures as counted misses, and crash safety (a writer stopped at any point of the write
path leaves only whole pages)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
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
from uniradix.storage.file_disk import HOST
from uniradix.storage.file_segments import FRAME, LIVE
from uniradix.storage.page_format import HEADER_BYTES

KS = KeySpace("org/m@rev1", "bfloat16", "layer_first", 1, "full")
PAGE = 1000  # a page of its own segment under the small caps below (over a quarter block)


def keys(n: int, start: int = 0) -> list[Any]:
    return KS.keys_for(RadixKey(list(range(start, start + n))))


def data(i: int, size: int = PAGE) -> bytes:
    return bytes([i % 256]) * size


def segment_of(store: FileBackend, key: Any) -> Path | None:
    where = store.locate(key)
    return None if where is None else where[0]


def capped(directory: Path, blocks: int) -> FileBackend:
    """A store with room for `blocks` blocks of segments besides its empty folders, plus the
    block a new segment reserves for its folder's growth."""
    empty = FileBackend(directory)
    return FileBackend(directory, max_bytes=empty.used_bytes + (blocks + 1) * empty.block_bytes)


def test_small_pages_share_segments_and_fill_the_cap(tmp_path: Path) -> None:
    # The case: 72-byte simulation pages (a header, no payload). One file per page
    # held 11 of them under a 100K cap; packed, a page costs 80 bytes.
    store = FileBackend(tmp_path, max_bytes=100_000)
    ks = keys(3000)
    for i in range(0, 3000, 50):
        assert store.batch_set(ks[i : i + 50], [b""] * 50) == 50
        assert store.used_bytes == du(tmp_path) <= 100_000
    held = sum(store.batch_exists([k]) for k in ks)
    assert held >= 0.7 * 100_000 / 80 and store.stats().pages_evicted == 3000 - held
    assert store.batch_exists(ks[-50:]) == 50  # the newest stayed
    assert len({segment_of(store, k) for k in ks[-50:]}) <= 2


def test_cap_is_never_exceeded_and_eviction_is_lru(tmp_path: Path) -> None:
    store = capped(tmp_path, 10)  # ten pages of a segment each
    assert store.max_bytes is not None
    ks = keys(60)
    rng = random.Random(0)
    hot = ks[0]
    store.batch_set([hot], [data(0)])
    i = 1
    while i < 60:
        n = min(rng.randint(1, 4), 60 - i)
        assert store.batch_set(ks[i : i + n], [data(j) for j in range(i, i + n)]) == n
        i += n
        store.batch_get([hot])  # keep one page hot: LRU must spare it
        assert store.used_bytes == du(tmp_path) <= store.max_bytes
    assert isinstance(store.batch_get([hot])[0], memoryview)
    assert store.stats().pages_evicted == 60 - 10
    # The newest 9 pages stayed (the tenth slot is the hot page's).
    assert store.batch_exists(ks[51:]) == 9 and store.batch_exists(ks[50:51]) == 0


def test_a_hit_keeps_its_whole_segment(tmp_path: Path) -> None:
    store = capped(tmp_path, 4)  # four segments of one block, small pages packed in them
    ks = keys(200)
    small = [data(i, 200) for i in range(200)]
    for i in range(0, 60, 5):
        store.batch_set(ks[i : i + 5], small[i : i + 5])
    first = segment_of(store, ks[0])
    store.batch_get([ks[0]])
    for i in range(60, 200, 5):
        store.batch_set(ks[i : i + 5], small[i : i + 5])
        store.batch_get([ks[0]])
    held = [segment_of(store, k) for k in ks]
    assert held[0] == first and all(held[i] == first for i in range(60) if held[i] is not None)
    assert sum(p is not None for p in held) >= 3 * (4096 // 280)  # pages of 280-byte frames
    pages = store.batch_get([k for k, p in zip(ks, held, strict=True) if p is not None])
    assert all(isinstance(p, memoryview) for p in pages)


def test_large_pages_get_a_segment_each(tmp_path: Path) -> None:
    store = FileBackend(tmp_path)  # no cap: 1 MiB segments, pages over 256 KiB alone
    big, ks = 300 << 10, keys(13)
    assert store.batch_set(ks[:3], [data(i, big) for i in range(3)]) == 3
    assert store.batch_set(ks[3:], [data(i, 100) for i in range(3, 13)]) == 10
    files = [segment_of(store, k) for k in ks]
    assert len(set(files[:3])) == 3 and len(set(files[3:])) == 1
    assert len(list((tmp_path / "segments").iterdir())) == 4
    assert all(f is not None and f.stat().st_size == 8 + FRAME.size + HEADER_BYTES + big
               for f in files[:3])  # fmt: skip
    assert store.used_bytes == du(tmp_path)
    pages = FileBackend(tmp_path).batch_get(ks[:3], expected_bytes=big)
    assert [bytes(p) for p in pages if isinstance(p, memoryview)] == [
        data(i, big) for i in range(3)
    ]


def test_restart_reads_whole_segments_through_its_read_window(tmp_path: Path) -> None:
    # 1 MiB segments of 135-byte frames: a scan reads them in 64 KiB windows, frames
    # straddling the windows' ends; large pages between them are read only by their heads.
    store = FileBackend(tmp_path)
    ks = keys(12_000)
    sizes = [55 if i % 1000 else 300 << 10 for i in range(12_000)]
    for i in range(0, 12_000, 500):
        assert store.batch_set(ks[i : i + 500], [data(j, sizes[j]) for j in range(i, i + 500)])
    assert len(list((tmp_path / "segments").iterdir())) > 12
    fresh = FileBackend(tmp_path)
    assert fresh.batch_exists(ks) == 12_000 and fresh.used_bytes == du(tmp_path)
    for j, page in zip(range(0, 12_000, 7), fresh.batch_get(ks[::7]), strict=True):
        assert isinstance(page, memoryview) and bytes(page) == data(j, sizes[j])


def test_page_larger_than_the_cap_is_refused(tmp_path: Path) -> None:
    store = capped(tmp_path, 2)
    assert store.batch_set(keys(1), [data(0)]) == 1
    before = du(tmp_path)
    assert store.batch_set(keys(1, 1), [data(1, 3 * store.block_bytes)]) == 0
    # Nothing was removed for a page that cannot fit.
    assert du(tmp_path) == before and store.batch_exists(keys(1)) == 1
    assert store.stats().failed_ops == 0


def test_index_is_rebuilt_oldest_first(tmp_path: Path) -> None:
    first = FileBackend(tmp_path)
    ks = keys(6)
    first.batch_set(ks, [data(i, 400 << 10) for i in range(6)])  # a segment each
    for i, k in enumerate(ks):  # make page 3's segment the oldest on disk
        path = segment_of(first, k)
        assert path is not None
        os.utime(path, (1000 + (0 if i == 3 else i + 10),) * 2)
    room = first.used_bytes - first.block_bytes  # all but one page (and the folder block)
    second = FileBackend(tmp_path, max_bytes=room)
    assert second.stats().pages_evicted == 1
    assert [isinstance(p, Miss) for p in second.batch_get(ks)] == [False] * 3 + [True] + [False] * 2
    assert second.used_bytes == du(tmp_path)


def test_deletions_and_repairs_last_across_restarts(tmp_path: Path) -> None:
    store = FileBackend(tmp_path)
    ks = keys(20)
    store.batch_set(ks, [data(i, 50) for i in range(20)])
    assert store.delete(ks[3:5]) == 2
    where = store.locate(ks[7])
    assert where is not None
    path, offset, length = where
    raw = bytearray(path.read_bytes())
    raw[offset + length - 1] ^= 0xFF  # the payload's last byte
    path.write_bytes(bytes(raw))
    page = store.batch_get([ks[7]])[0]
    assert isinstance(page, Miss) and page.reason is MissReason.BAD_CHECKSUM
    assert store.stats().pages_repaired == 1
    again = FileBackend(tmp_path)  # a restarted process reads the segments again
    pages = again.batch_get(ks, expected_bytes=50)
    gone = {3, 4, 7}
    for i, p in enumerate(pages):
        assert isinstance(p, Miss) if i in gone else bytes(p) == data(i, 50)
    assert again.stats().pages_corrupt == 0  # dead frames are absent, not read
    assert again.batch_set([ks[7]], [data(7, 50)]) == 1  # the next backup writes it anew
    assert FileBackend(tmp_path).batch_exists(ks[5:8]) == 3


def test_pages_written_by_another_store_are_found(tmp_path: Path) -> None:
    reader, writer = FileBackend(tmp_path), FileBackend(tmp_path)
    ks = keys(6)
    writer.batch_set(ks[:3], [data(i, 50) for i in range(3)])
    assert reader.batch_exists(ks) == 3  # a new segment: found by listing the folder
    writer.batch_set(ks[3:], [data(i, 50) for i in range(3, 6)])
    assert reader.batch_exists(ks) == 6  # appended to it: read on from where it stopped
    pages = reader.batch_get(ks, expected_bytes=50)
    assert [bytes(p) for p in pages if isinstance(p, memoryview)] == [data(i, 50) for i in range(6)]
    assert reader.used_bytes == writer.used_bytes == du(tmp_path)


def test_torn_tail_of_a_dead_writer_is_cut_at_start(tmp_path: Path) -> None:
    store = FileBackend(tmp_path)
    ks = keys(4)
    store.batch_set(ks[:2], [data(i, 50) for i in range(2)])
    store.close()
    own = segment_of(FileBackend(tmp_path), ks[0])
    assert own is not None
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    torn = FRAME.pack(LIVE, 0, 0, 500) + b"x" * 100  # says 500 bytes, has 100
    dead = own.with_name(f"{HOST}-{int(done.stdout)}-0123abcd-00000001.seg")
    alive = own.with_name(f"{HOST}-{os.getpid()}-4567abcd-00000001.seg")
    elsewhere = own.with_name(f"otherhost-{int(done.stdout)}-89abcdef-00000001.seg")
    damaged = own.with_name(f"{HOST}-{int(done.stdout)}-0123abcd-00000002.seg")
    whole = own.stat().st_size
    own.rename(dead)
    for copy in (alive, elsewhere, damaged):  # a live store's, another machine's: may grow
        copy.write_bytes(dead.read_bytes())
    for path in (dead, alive, elsewhere):
        with open(path, "ab") as f:
            f.write(torn)
    with open(damaged, "ab") as f:  # not a torn frame (a bad state byte): left as it is
        f.write(b"\xff" + torn[1:])
    fresh = FileBackend(tmp_path)
    assert dead.stat().st_size == whole
    assert alive.stat().st_size == elsewhere.stat().st_size == whole + len(torn)
    assert damaged.stat().st_size == whole + len(torn)
    pages = fresh.batch_get(ks[:2], expected_bytes=50)
    assert [bytes(p) for p in pages if isinstance(p, memoryview)] == [data(0, 50), data(1, 50)]
    assert fresh.used_bytes == du(tmp_path)


def test_unremovable_segment_does_not_block_eviction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = capped(tmp_path, 3)
    ks = keys(8)
    store.batch_set(ks[:3], [data(i) for i in range(3)])
    stuck = segment_of(store, ks[0])
    real_unlink = os.unlink

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if Path(path) == stuck:
            raise PermissionError(f"cannot remove {path}")
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    assert store.batch_set(ks[3:8], [data(i) for i in range(3, 8)]) == 5
    # The stuck segment is still counted, and the cap holds by `du`.
    assert stuck is not None and stuck.exists()
    assert store.max_bytes is not None and store.used_bytes == du(tmp_path) <= store.max_bytes
    assert store.batch_exists(ks[6:8]) == 2 and store.batch_exists(ks[5:6]) == 0


def test_disk_errors_are_counted_failures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileBackend(tmp_path)
    ks = keys(4)

    def full_disk(*args: Any) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwritev", full_disk)
    assert store.batch_set(ks, [data(i) for i in range(4)]) == 0
    monkeypatch.undo()
    assert list((tmp_path / "segments").iterdir()) == []  # a failed write leaves nothing
    s = store.stats()
    assert s.failed_ops == 1 and s.pages_written == 0
    assert store.batch_set(ks, [data(i) for i in range(4)]) == 4
    assert store.used_bytes == du(tmp_path)


def test_open_segment_removed_by_another_store(tmp_path: Path) -> None:
    store = FileBackend(tmp_path)
    ks = keys(6)
    store.batch_set(ks[:3], [data(i, 50) for i in range(3)])
    path = segment_of(store, ks[0])
    assert path is not None
    path.unlink()  # another store evicted it
    assert store.batch_set(ks[3:], [data(i, 50) for i in range(3, 6)]) == 3
    pages = store.batch_get(ks, expected_bytes=50)
    assert [isinstance(p, Miss) for p in pages] == [True] * 3 + [False] * 3
    assert store.stats().failed_ops == 0 and store.used_bytes == du(tmp_path)


def test_urls_and_the_registry(tmp_path: Path) -> None:
    store = open_backend("file")  # no path: a temporary directory, removed at close
    assert isinstance(store, FileBackend) and store.directory.exists()
    store.close()
    assert not store.directory.exists()
    capped_ = open_backend(f"file://{tmp_path}?max_bytes=1M&fsync=1&breaker_failures=5")
    assert isinstance(capped_, FileBackend)
    assert (capped_.max_bytes, capped_.fsync, capped_.breaker.failure_threshold) == (
        1 << 20,
        True,
        5,
    )
    assert capped_.batch_set(keys(2), [data(0), data(1)]) == 2  # the fsync path
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


def _crash_points(frame_bytes: int) -> list[tuple[str, int]]:
    offsets = sorted({frame_bytes * i // 100 for i in range(100)} | {FRAME.size, frame_bytes})
    return [("open", 0), ("fsync", 0), ("fstat", 0)] + [("pwritev", k) for k in offsets]


def _inject(point: tuple[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    step, limit = point
    real: dict[str, Callable[..., Any]] = {
        name: getattr(os, name) for name in ("open", "pwritev", "fsync", "fstat")
    }
    if step == "pwritev":

        def pwritev(fd: int, buffers: list[memoryview], offset: int) -> int:
            os.pwrite(fd, b"".join(bytes(b) for b in buffers)[:limit], offset)
            raise Crash

        monkeypatch.setattr(os, "pwritev", pwritev)
    else:

        def crash(*args: Any, **kwargs: Any) -> Any:
            if step == "open" and not args[1] & os.O_CREAT:
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
    # Each point twice: in the write that makes a segment, and in an append to one.
    points = _crash_points(8 + FRAME.size + HEADER_BYTES + PAGE)
    ks = keys(3 * len(points))
    written: list[tuple[Any, bytes]] = []
    for i, point in enumerate(points):
        for first in (True, False) if point[0] != "open" else (True,):
            store = FileBackend(tmp_path, fsync=True)
            j = 3 * i + (0 if first else 1)
            if not first:  # a first page makes the segment; the crash is in an append
                store.batch_set([ks[j + 1]], [data(j + 1)])
                written.append((ks[j + 1], data(j + 1)))
            with monkeypatch.context() as m:
                _inject(point, m)
                with pytest.raises(Crash):
                    store.batch_set([ks[j]], [data(j)])
            written.append((ks[j], data(j)))
        _check_only_whole_pages(tmp_path, written)
    # The leftovers of the crashed writers never block a later write of the same pages.
    again = FileBackend(tmp_path)
    assert again.batch_set(ks, [data(i) for i in range(len(ks))]) == len(ks)
    assert all(isinstance(p, memoryview) for p in again.batch_get(ks, expected_bytes=PAGE))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_writer_killed_at_random_times_leaves_only_whole_pages(tmp_path: Path) -> None:
    ks = keys(400)
    rng = random.Random(1)
    sizes = [256 * 1024, 100]  # large pages (a kill often lands inside a write) and small
    for _ in range(20):
        pid = os.fork()
        if pid == 0:  # the writer: rewrite random pages until killed
            try:
                store = FileBackend(tmp_path)
                while True:
                    j = random.randrange(len(ks))
                    store.delete([ks[j]])
                    store.batch_set([ks[j]], [bytes([j % 256]) * sizes[j % 2]])
            finally:
                os._exit(0)
        time.sleep(rng.uniform(0.005, 0.05))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        fresh = FileBackend(tmp_path)
        pages = fresh.batch_get(ks)
        for j, page in enumerate(pages):
            assert not isinstance(page, Miss) or page.reason is MissReason.ABSENT
            assert isinstance(page, Miss) or bytes(page) == bytes([j % 256]) * sizes[j % 2]
        assert fresh.stats().pages_corrupt == 0


def test_two_stores_sharing_a_directory_evict_and_write_without_errors(tmp_path: Path) -> None:
    # Each evicts segments, the other's too, while the other appends to them: no failed
    # write, no wrong page, and each store's count matches the disk at the end.
    ks = keys(2000)
    stores = [FileBackend(tmp_path, max_bytes=60_000) for _ in range(2)]

    def writer(store: FileBackend, offset: int) -> None:
        for i in range(offset, 2000, 20):
            store.batch_set(ks[i : i + 10], [bytes([j % 256]) * 8 for j in range(i, i + 10)])
            store.batch_get(ks[i - 100 : i])

    threads = [threading.Thread(target=writer, args=(s, 10 * n)) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [s.stats().failed_ops for s in stores] == [0, 0]
    assert du(tmp_path) <= 2 * 60_000
    pages = FileBackend(tmp_path).batch_get(ks, expected_bytes=8)
    assert any(isinstance(p, memoryview) for p in pages)
    for j, page in enumerate(pages):
        assert isinstance(page, Miss) or bytes(page) == bytes([j % 256]) * 8


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_processes_sharing_a_directory_read_no_wrong_page(tmp_path: Path) -> None:
    # Three processes write, read, delete and evict on one directory under one cap, small
    # and large pages mixed: each checks every page it reads; none fails a call.
    ks, cap = keys(300), 200_000
    sizes = [50, 20_000, 8]  # packed, a segment each under this cap, packed

    def payload(j: int) -> bytes:
        return bytes([j % 256]) * sizes[j % 3]

    pids = []
    for n in range(3):
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                store, rng = FileBackend(tmp_path, max_bytes=cap), random.Random(n)
                deadline = time.monotonic() + 1.5
                while time.monotonic() < deadline:
                    lo = rng.randrange(290)
                    op = rng.random()
                    if op < 0.5:
                        store.batch_set(ks[lo : lo + 10], [payload(j) for j in range(lo, lo + 10)])
                    elif op < 0.9:
                        for j, page in enumerate(store.batch_get(ks[lo : lo + 10]), lo):
                            assert isinstance(page, Miss) or bytes(page) == payload(j)
                    else:
                        store.delete(ks[lo : lo + 2])
                s = store.stats()
                status = 0 if s.failed_ops == s.pages_corrupt == 0 else 2
            finally:
                os._exit(status)
        pids.append(pid)
    assert [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids] == [0, 0, 0]
    fresh = FileBackend(tmp_path, max_bytes=cap)
    pages = fresh.batch_get(ks)
    assert any(isinstance(p, memoryview) for p in pages)
    for j, page in enumerate(pages):
        assert isinstance(page, Miss) or bytes(page) == payload(j)
    assert fresh.stats().pages_corrupt == 0
    assert fresh.used_bytes == du(tmp_path) <= cap  # the new one made it fit its cap


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_writes_segments_of_its_own(tmp_path: Path) -> None:
    store = FileBackend(tmp_path)
    ks = keys(40)
    store.batch_set(ks[:10], [data(i, 50) for i in range(10)])  # the parent's open segment
    pid = os.fork()
    if pid == 0:  # the child goes on with the parent's store object
        os._exit(0 if store.batch_set(ks[10:20], [data(i, 50) for i in range(10, 20)]) else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    store.batch_set(ks[20:], [data(i, 50) for i in range(20, 40)])  # appends where it was
    assert len(list((tmp_path / "segments").iterdir())) == 2
    pages = FileBackend(tmp_path).batch_get(ks, expected_bytes=50)
    assert [bytes(p) for p in pages if isinstance(p, memoryview)] == [
        data(i, 50) for i in range(40)
    ]
