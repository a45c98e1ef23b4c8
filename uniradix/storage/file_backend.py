"""`file://DIR`: the embedded L3, pages packed into segment files under a directory, with a
byte cap on what the directory uses on disk. Segments are
`DIR/segments/<host>-<pid>-<instance>-<seq>.seg` (the format: `file_segments`).

- **Packing.** A store appends its pages to a segment of its own until the segment reaches
  `segment_bytes` (1 MiB; at most 1/32 of the cap, at least one block); a page bigger than a
  quarter of that gets a segment of its own, a whole file. A 72-byte page costs 80 bytes.
- **Whole pages only.** A page is indexed once its whole frame is in the file, so a torn
  frame is never read; at the next start a dead writer's torn tail is cut off.
- **Self-repair.** A page that fails verification is deleted (`StorageBackend.batch_get`):
  marked dead in its segment, so no process reads it again, and the next backup rewrites it.
- **fsync policy.** Off by default: L3 is a cache, and a page torn by a power loss fails its
  frame, header or checksum and reads as a miss, never as data. `fsync=1` syncs each page's
  segment after the write, and the folder after a segment is made.
- **Byte cap, LRU by segment.** The cap counts what the filesystem allocates, as `du` does
  (each segment's blocks, and the store's two folders). A write first removes whole
  segments, least recently used first (a hit refreshes its segment; emptied segments go
  first; an un-removable file stays counted and never blocks eviction), and reserves its
  growth until it ends, so the store and its writes in flight never pass the cap.
- **Shared directory.** Stores sharing a directory (in one process or many) each append only
  to their own segments and read all of them: the index is built from every segment at
  start (the newest copy wins), and a lookup that misses lists the folder again if it
  changed and reads on in the other live writers' newest segments. No wrong data (pages are
  verified, read whole or not at all); a page one store deletes is a miss for every store
  reading that copy; each store keeps the cap on what it counts (N stores: at most N caps).
- **Bounded calls.** The index lock is never held across a disk call. Past `timeout_s`
  (default 2 s) a call starts no more disk work: a waiting write is refused, a write stores a
  shorter prefix (both pause backups, as a full store does), a read gives the rest as
  misses, a lookup answers from the index as it is. A call lasts at most its timeout plus
  one page's disk calls (its write, and the unlinks of the segments evicted for it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

from uniradix.hashing.storage_keys import PageKey
from uniradix.storage import file_disk as disk
from uniradix.storage import file_segments as segs
from uniradix.storage.backend import (
    BREAKER_OPTIONS,
    StorageBackend,
    StoredPage,
    breaker_from_options,
    register_backend,
    url_options,
)
from uniradix.storage.breaker import CircuitBreaker
from uniradix.storage.file_catalog import Location, Segment, SegmentCatalog
from uniradix.storage.file_disk import parse_bytes
from uniradix.storage.page_format import Payload

MAX_SEGMENT_BYTES = 1 << 20
DEFAULT_TIMEOUT_S = 2.0


class FileBackend(StorageBackend):
    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        max_bytes: int | None = None,
        fsync: bool = False,
        breaker: CircuitBreaker | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        super().__init__(breaker)
        if max_bytes is not None and max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1 or None, got {max_bytes}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = timeout_s
        self._owns_dir = directory is None
        self.directory = Path(
            tempfile.mkdtemp(prefix="uniradix-l3-") if directory is None else directory
        )
        self.max_bytes = max_bytes
        self.fsync = fsync
        self.block_bytes = disk.block_bytes(self.directory)
        share = MAX_SEGMENT_BYTES if max_bytes is None else max_bytes // 32
        share -= share % self.block_bytes
        self.segment_bytes = min(MAX_SEGMENT_BYTES, max(self.block_bytes, share))
        self._index_lock = threading.Lock()  # guards the catalog; never held across disk I/O
        self._write_lock = threading.Lock()  # one writer appends to this store's segments
        self._cat = SegmentCatalog(
            self.directory, _new_owner(), self.block_bytes, max_bytes, self._index_lock
        )
        self._segs_dir = self._cat.folder
        self._seq = 0
        self._pid = os.getpid()
        self._cat.rebuild()

    # -- writing -----------------------------------------------------------------------------

    def _plan(self, frame_bytes: int) -> tuple[str, int, int] | None:
        """Where a frame goes: (segment, frame offset, disk bytes to reserve), with the room
        made once `unlink_evicted` ran; offset 0 means a new segment. None if it does not
        fit (index lock held)."""
        small = frame_bytes <= self.segment_bytes // 4
        if small and self._cat.open is not None:
            seg = self._cat.segments[self._cat.open]
            if seg.end + frame_bytes <= self.segment_bytes:
                growth = max(0, disk.round_up(seg.end + frame_bytes, self.block_bytes) - seg.disk)
                if self._cat.make_room(growth, keep=self._cat.open):
                    return self._cat.open, seg.end, growth
            self._cat.close_open()  # full, or in the way of the room it needs: start another
        # A new segment: its blocks, and one more for the folder it may grow.
        growth = disk.round_up(len(segs.MAGIC) + frame_bytes, self.block_bytes) + self.block_bytes
        if not self._cat.make_room(growth):
            return None
        self._seq += 1
        name = segs.segment_name(self._cat.owner, self._seq)
        self._cat.segments[name] = Segment(self._cat.owner, self._seq)
        if small:
            self._cat.open = name
        return name, 0, growth

    def _append(self, seg_name: str, offset: int, buffers: list[memoryview]) -> os.stat_result:
        """Writes a frame at `offset` of this store's segment (a new one at 0, after the
        magic); a failed write leaves the segment as it was."""
        new = offset == 0
        if new:
            fd = os.open(self._segs_dir / seg_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            buffers.insert(0, memoryview(segs.MAGIC))
        else:
            fd = self._cat.open_fd
        try:
            disk.pwrite_all(fd, buffers, offset)
            if self.fsync:
                os.fsync(fd)
            st = os.fstat(fd)
        except Exception:
            if new:
                os.close(fd)
            else:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, offset)
            raise
        if new and self.fsync:
            dir_fd = os.open(self._segs_dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        if new and seg_name == self._cat.open:
            self._cat.open_fd = fd
        elif new:
            os.close(fd)
        return st

    def _check_open(self) -> None:
        """Another store may have removed this store's open segment: start another. A forked
        child is another writer: it appends to segments of its own."""
        cat = self._cat
        if os.getpid() != self._pid:
            with self._index_lock:
                self._pid, cat.owner = os.getpid(), _new_owner()
                cat.close_open()
        elif cat.open is not None and cat.open_fd >= 0 and os.fstat(cat.open_fd).st_nlink == 0:
            with self._index_lock:
                cat.forget(cat.open)

    # -- store operations --------------------------------------------------------------------

    def _names(self, keys: Sequence[PageKey]) -> list[str]:
        # Without the hash tag: one directory has no slots, and a frame's name is then read
        # back from its page header (`file_segments`), so a small page stays small.
        return [k.stem for k in keys]

    def _store_exists_prefix(self, names: list[str]) -> int:
        found = self._indexed_prefix(names, 0)
        if found < len(names):  # another store may have written the rest: look again
            self._cat.refresh(time.monotonic() + self.timeout_s)
            found = self._indexed_prefix(names, found)
        return found

    def _indexed_prefix(self, names: list[str], start: int) -> int:
        with self._index_lock:
            index = self._cat.index
            return next((i for i in range(start, len(names)) if names[i] not in index), len(names))

    def _store_get(self, names: list[str]) -> list[StoredPage | None]:
        deadline = time.monotonic() + self.timeout_s
        with self._index_lock:
            missing = any(name not in self._cat.index for name in names)
        if missing:
            self._cat.refresh(deadline)
        with self._index_lock:
            where = [self._cat.index.get(name) for name in names]
        out: list[StoredPage | None] = []
        fds: dict[str, int] = {}
        try:
            for i, (name, loc) in enumerate(zip(names, where, strict=True)):
                if i and loc is not None and time.monotonic() > deadline:
                    loc = None  # out of time: a miss, not read
                blob = None if loc is None else self._read_frame(loc, fds)
                if loc is not None and blob is None:  # removed or marked dead meanwhile
                    with self._index_lock:
                        if self._cat.index.get(name) == loc:
                            self._cat.drop(name)
                out.append(blob)
        finally:
            for fd in fds.values():
                os.close(fd)
        with self._index_lock:
            for seg_name in fds:
                if seg_name in self._cat.segments:
                    self._cat.segments.move_to_end(seg_name)
        for seg_name in fds:
            # The LRU order a restarted process rebuilds; the data is read already, so a
            # segment removed meanwhile or a directory this process may only read loses nothing.
            if time.monotonic() > deadline:
                break
            with contextlib.suppress(OSError):
                os.utime(self._segs_dir / seg_name)
        return out

    def _read_frame(self, loc: Location, fds: dict[str, int]) -> memoryview | None:
        seg_name, offset, length = loc
        if seg_name not in fds:
            try:
                fds[seg_name] = os.open(self._segs_dir / seg_name, os.O_RDONLY)
            except FileNotFoundError:
                return None
        return segs.blob_of(os.pread(fds[seg_name], length, offset))

    def _store_set(self, names: list[str], headers: list[bytes], payloads: list[Payload]) -> int:
        deadline = time.monotonic() + self.timeout_s
        if not self._write_lock.acquire(timeout=self.timeout_s):
            self._note_refusal(f"another write held the store past timeout_s={self.timeout_s}")
            return 0
        try:
            self._check_open()
            for i, (name, header, payload) in enumerate(zip(names, headers, payloads, strict=True)):
                if i and time.monotonic() > deadline:
                    self._note_refusal(f"write took over timeout_s={self.timeout_s}")
                    return i
                if not self._store_one(name, header, payload):
                    return i
        finally:
            self._write_lock.release()
        return len(names)

    def _store_one(self, name: str, header: bytes, payload: Payload) -> bool:
        """Appends one page (write lock held); False if it does not fit the cap."""
        body = memoryview(payload).cast("B")
        head = segs.frame_head(name, header, len(header) + body.nbytes)
        frame_bytes = len(head) + len(header) + body.nbytes
        with self._index_lock:
            if (loc := self._cat.index.get(name)) is not None:  # a page's bytes are fixed
                self._cat.segments.move_to_end(loc[0])  # by its key: keep it
                self._count_kept()
                return True
            plan = self._plan(frame_bytes)
            if plan is None:
                return False
            seg_name, offset, growth = plan
            self._cat.reserved += growth
        try:
            if not self._unlink_evicted(keep=seg_name):
                self._undo(seg_name, offset, growth)
                return False
            st = self._append(seg_name, offset, [memoryview(head), memoryview(header), body])
            folder_bytes = self._cat.folder_disk() if offset == 0 else None
        except Exception:
            self._undo(seg_name, offset, growth)
            raise
        with self._index_lock:
            self._cat.reserved -= growth
            if offset == 0:  # a new segment: its frame follows the magic
                offset = len(segs.MAGIC)
            if folder_bytes is not None:
                self._cat.folder_bytes = folder_bytes
            seg = self._cat.segments[seg_name]
            seg.end = offset + frame_bytes
            self._cat.account(seg, st)
            self._cat.put(seg_name, seg, name, offset, frame_bytes)
            self._cat.segments.move_to_end(seg_name)
        return True

    def _undo(self, seg_name: str, offset: int, growth: int) -> None:
        """A write planned and not made: its reservation back, a new segment removed."""
        with self._index_lock:
            self._cat.reserved -= growth
            if offset == 0:
                self._cat.remove(seg_name, evicted=False)
        self._cat.unlink_evicted()

    def _unlink_evicted(self, keep: str) -> bool:
        """Deletes the segments evicted to make room (no lock held); one that cannot be
        deleted stays counted, so more are evicted: whether the write still fits the cap."""
        while not self._cat.unlink_evicted():
            with self._index_lock:
                if not self._cat.make_room(0, keep=keep):
                    return False
        return True

    def _store_delete(self, names: list[str]) -> int:
        with self._index_lock:
            missing = any(name not in self._cat.index for name in names)
        if missing:
            self._cat.refresh(time.monotonic() + self.timeout_s)
        with self._index_lock:
            where = [loc for name in names if (loc := self._cat.drop(name)) is not None]
        for seg_name, offset, _ in where:
            try:
                fd = os.open(self._segs_dir / seg_name, os.O_WRONLY)
            except FileNotFoundError:
                continue
            try:
                os.pwrite(fd, bytes([segs.DEAD]), offset)
            finally:
                os.close(fd)
        return len(where)

    def _store_clear(self) -> None:
        with self._write_lock:
            with self._index_lock:
                for name in list(self._cat.segments):
                    self._cat.remove(name, evicted=False)
            self._cat.unlink_evicted()
            on_disk = set(os.listdir(self._segs_dir))
            with self._index_lock:  # an un-removable file gone at last is no longer counted
                stuck = {n: b for n, b in self._cat.stuck.items() if n in on_disk}
                self._cat.stuck = stuck
            for name in on_disk - stuck.keys():  # other stores' pages not indexed yet
                (self._segs_dir / name).unlink(missing_ok=True)
            folder_bytes = self._cat.folder_disk()
            with self._index_lock:
                self._cat.folder_bytes = folder_bytes

    def _store_close(self) -> None:
        with self._write_lock:
            self._cat.close_open()
        if self._owns_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _store_evicted_pages(self) -> int:
        return self._cat.evicted

    @property
    def used_bytes(self) -> int:
        """Disk bytes of the store's folders, its segments, the un-removable ones and the
        writes in flight: what `du` shows for the directory once the writes end."""
        with self._index_lock:
            return self._cat.used()

    def locate(self, key: PageKey) -> tuple[Path, int, int] | None:
        """Where the page's bytes (its header, then its payload) lie: (segment file,
        offset, length); None if it is not stored. For tools and fault-injection tests."""
        name = key.stem
        if self._indexed_prefix([name], 0) == 0:
            self._cat.refresh(time.monotonic() + self.timeout_s)
        with self._index_lock:
            loc = self._cat.index.get(name)
        if loc is None:
            return None
        seg_name, offset, length = loc
        path = self._segs_dir / seg_name
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                name_len = segs.FRAME.unpack(f.read(segs.FRAME.size))[2]
        except FileNotFoundError:  # removed meanwhile
            return None
        head = segs.FRAME.size + name_len
        return path, offset + head, length - head


def _new_owner() -> str:
    """A store's name in its segments' names: host, pid (whether it may still write), and
    an instance id (stores of one process apart)."""
    return f"{disk.HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _from_url(url: str) -> FileBackend:
    options = url_options(url, {"max_bytes", "fsync", "timeout_s"} | BREAKER_OPTIONS)
    directory: str | None = None
    if "://" in url:
        parts = urlsplit(url)
        directory = unquote(parts.netloc + parts.path) or None
    max_bytes = options.get("max_bytes")
    return FileBackend(
        directory,
        max_bytes=parse_bytes(max_bytes) if max_bytes else None,
        fsync=options.get("fsync", "0") not in ("0", "false", ""),
        breaker=breaker_from_options(options),
        timeout_s=float(options.get("timeout_s", DEFAULT_TIMEOUT_S)),
    )


register_backend("file", _from_url)
