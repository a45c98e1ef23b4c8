"""What a file store (`uniradix.storage.file_backend`) knows of its segment folder: which
segment holds each page, the segments in LRU order, and the disk bytes they use.

The store's index lock (`lock`) guards it, and is held only for work in memory, never across
a disk call, so a probe never waits for a disk. Methods are called with the lock held, but
`rebuild`, `refresh`, `load`, `read_on` and `unlink_evicted`, which do the disk work with the
lock released and take it only to apply what they found. Besides this store's own writes, the
folder changes under it (other stores sharing the directory write, delete and evict):
`refresh` catches up, and a segment found gone is forgotten with its pages.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from uniradix.storage import file_disk as disk
from uniradix.storage import file_segments as segs

# Folder mtimes are coarse (a clock tick): a folder changed this close to its last listing
# may have changed after it, so it is listed again.
MTIME_SLACK_S = 0.05
Location = tuple[str, int, int]  # (segment, frame offset, frame bytes)


@dataclass(slots=True, eq=False)
class Segment:
    owner: str  # the store that writes it ("" for a file not named as a segment)
    seq: int
    end: int = 0  # bytes read (another store's) or written (ours) so far: a frame boundary
    disk: int = 0  # disk bytes counted for it
    names: set[str] = field(default_factory=set)  # indexed pages in it


class SegmentCatalog:
    def __init__(
        self,
        directory: Path,
        owner: str,
        block_bytes: int,
        max_bytes: int | None,
        lock: threading.Lock,
    ) -> None:
        self.lock = lock
        self._refresh_lock = threading.Lock()  # one refresh at a time (it reads segments on)
        self.directory = directory
        self.folder = directory / "segments"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.owner = owner  # this store: it appends to the segments it names so
        self.block_bytes = block_bytes
        self.max_bytes = max_bytes
        self.index: dict[str, Location] = {}
        self.segments: OrderedDict[str, Segment] = OrderedDict()  # LRU first
        self.stuck: dict[str, int] = {}  # segments whose unlink failed: still on disk
        self.newest: dict[str, str] = {}  # another live store -> its newest segment
        self.open: str | None = None  # this store's segment taking small pages
        self.open_fd = -1
        self.folder_bytes = 0  # the store's two folders
        self.segment_disk = 0  # sum of the segments' `disk`
        self.reserved = 0  # disk bytes of the writes in flight
        self.evicted = 0  # pages
        # Segments taken out to make room, still on disk until `unlink_evicted`: their bytes
        # stay counted in `used()` until then (what `du` sees).
        self.doomed: dict[str, int] = {}
        self._listed_ns = 0  # the folder's mtime at its last listing
        self._listed_at = 0.0

    def rebuild(self) -> None:
        """Indexes every segment, oldest first, and makes the store fit its cap."""
        for legacy in ("pages", "tmp"):  # the one-file-per-page layout of earlier versions
            shutil.rmtree(self.directory / legacy, ignore_errors=True)
        self._listed_ns, self._listed_at = os.stat(self.folder).st_mtime_ns, time.time()
        found: list[tuple[int, str]] = []
        for entry in os.scandir(self.folder):
            with contextlib.suppress(FileNotFoundError):  # removed by another store
                found.append((entry.stat().st_mtime_ns, entry.name))
        for _, name in sorted(found):
            self.load(name, at_start=True)
        folder_bytes = self.folder_disk()
        with self.lock:
            self.folder_bytes = folder_bytes
            self.make_room(0)
        self.unlink_evicted()

    def load(self, name: str, at_start: bool = False) -> None:
        """Registers segment `name` found on disk, newest, and indexes its pages. At start, a
        torn tail left by a writer that is gone is cut off."""
        parsed = segs.parse_name(name)
        seg = Segment(parsed[0], parsed[3]) if parsed else Segment("", 0)
        alive = parsed is not None and disk.writer_alive(parsed[1], parsed[2])
        moved_on: tuple[str, Segment] | None = None
        with self.lock:
            self.segments[name] = seg
            if alive and seg.owner != self.owner:
                last = self.newest.get(seg.owner, "")
                newest = self.segments.get(last)
                if newest is None or newest.seq < seg.seq:
                    self.newest[seg.owner] = name
                    if newest is not None:  # its writer moved on: read what it added last
                        moved_on = (last, newest)
        if moved_on is not None:
            self.read_on(*moved_on)
        self.read_on(name, seg, trim=at_start and parsed is not None and not alive)

    def read_on(self, name: str, seg: Segment, trim: bool = False) -> None:
        """Indexes the pages of segment `name` past what was read of it."""
        with self.lock:
            start = seg.end
        found = segs.read_segment(self.folder / name, start, trim)
        with self.lock:
            if self.segments.get(name) is not seg:  # evicted or forgotten meanwhile
                return
            if found is None:  # removed by another store
                self.forget(name)
                return
            entries, seg.end, st = found
            for entry in entries:
                self.put(name, seg, *entry)
            self.account(seg, st)

    def refresh(self, deadline: float) -> None:
        """Finds what other stores wrote since the last look. One thread at a time: another
        waits for it until `deadline` at most, then goes on with the index as it is; past
        `deadline`, segments not read yet are left to the next look."""
        if not self._refresh_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return
        try:
            self._refresh(deadline)
        finally:
            self._refresh_lock.release()

    def _refresh(self, deadline: float) -> None:
        st = os.stat(self.folder)
        if st.st_mtime_ns != self._listed_ns or st.st_mtime >= self._listed_at - MTIME_SLACK_S:
            listed_at = time.time()
            on_disk = set(os.listdir(self.folder))
            with self.lock:
                for name, seg in list(self.segments.items()):
                    # This store's own: one being made is not listed yet; see `_check_open`.
                    if name not in on_disk and seg.owner != self.owner:
                        self.forget(name)
                known = self.segments.keys() | self.stuck.keys() | self.doomed.keys()
                new = sorted(on_disk - known)
            for i, name in enumerate(new):
                if time.monotonic() > deadline:
                    new = new[i:]
                    break
                self.load(name)
            else:
                new = []
            if not new:  # every new segment read: the listing is up to date
                self._listed_ns, self._listed_at = st.st_mtime_ns, listed_at
            folder_bytes = self.folder_disk()
            with self.lock:
                self.folder_bytes = folder_bytes
        with self.lock:
            newest = list(self.newest.values())
        for name in newest:
            if time.monotonic() > deadline:
                return
            try:
                size = os.stat(self.folder / name).st_size
            except FileNotFoundError:
                with self.lock:
                    self.forget(name)
                continue
            with self.lock:
                newer = self.segments.get(name)
                behind = newer is not None and size > newer.end
            if newer is not None and behind:
                self.read_on(name, newer)

    def put(self, seg_name: str, seg: Segment, name: str, offset: int, length: int) -> None:
        self.drop(name)  # the newest copy wins
        self.index[name] = (seg_name, offset, length)
        seg.names.add(name)

    def drop(self, name: str) -> Location | None:
        where = self.index.pop(name, None)
        if where is not None and (seg := self.segments.get(where[0])) is not None:
            seg.names.discard(name)
            if not seg.names and where[0] != self.open:
                self.segments.move_to_end(where[0], last=False)  # nothing to lose: first out
        return where

    def forget(self, name: str) -> None:
        """Segment `name` is gone from disk (another store removed it): drops its pages."""
        seg = self.segments.pop(name, None)
        if seg is None:
            return
        for page in seg.names:
            del self.index[page]
        self.segment_disk -= seg.disk
        if self.newest.get(seg.owner) == name:
            del self.newest[seg.owner]
        if name == self.open:
            self.close_open()

    def remove(self, name: str, evicted: bool) -> None:
        """Takes segment `name` out of the store; `unlink_evicted` then deletes its file."""
        seg = self.segments[name]
        self.doomed[name] = seg.disk  # its bytes stay counted until the file is gone
        self.segment_disk -= seg.disk
        seg.disk = 0
        self.evicted += len(seg.names) if evicted else 0
        self.forget(name)

    def unlink_evicted(self) -> bool:
        """Deletes the files of the segments `remove` took out (lock not held). False if one
        could not be deleted: its bytes stay counted (`stuck`) and the caller makes room
        again."""
        with self.lock:
            doomed, self.doomed = self.doomed, {}
            # Still counted while they are unlinked, where no other call can take them.
            self.stuck.update(doomed)
        failed = False
        for name in doomed:
            try:
                os.unlink(self.folder / name)
            except FileNotFoundError:
                pass  # another store removed it
            except OSError:
                failed = True
                continue
            with self.lock:
                del self.stuck[name]
        return not failed

    def account(self, seg: Segment, st: os.stat_result) -> None:
        size = disk.disk_bytes(st, self.block_bytes)
        self.segment_disk += size - seg.disk
        seg.disk = size

    def folder_disk(self) -> int:
        """Disk bytes of the store's two folders (lock not held: two `stat` calls)."""
        return sum(
            disk.disk_bytes(os.stat(d), self.block_bytes) for d in (self.directory, self.folder)
        )

    def used(self) -> int:
        removing = sum(self.stuck.values()) + sum(self.doomed.values())
        return self.folder_bytes + self.segment_disk + removing + self.reserved

    def make_room(self, num_bytes: int, keep: str | None = None) -> bool:
        """Takes LRU segments (not `keep`) out until `num_bytes` more fit once their files
        are deleted (`unlink_evicted`, before the write)."""
        if self.max_bytes is None:
            return True
        if self.folder_bytes + num_bytes > self.max_bytes:
            return False  # would not fit in an empty store: remove nothing
        while self.used() - sum(self.doomed.values()) + num_bytes > self.max_bytes:
            victim = next((name for name in self.segments if name != keep), None)
            if victim is None:
                return False
            self.remove(victim, evicted=True)
        return True

    def close_open(self) -> None:
        if self.open_fd >= 0:
            os.close(self.open_fd)
        self.open, self.open_fd = None, -1
