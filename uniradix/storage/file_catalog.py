"""What a file store (`uniradix.storage.file_backend`) knows of its segment folder: which
segment holds each page, the segments in LRU order, and the disk bytes they use.

Not thread-safe: the store calls it under its index lock. Besides this store's own writes,
the folder changes under it (other stores sharing the directory write, delete and evict):
`refresh` catches up, and a segment found gone is forgotten with its pages.
"""

from __future__ import annotations

import contextlib
import os
import shutil
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
    def __init__(self, directory: Path, owner: str, block_bytes: int, max_bytes: int | None):
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
        self.count_folders()
        self.make_room(0)

    def load(self, name: str, at_start: bool = False) -> None:
        """Registers segment `name` found on disk, newest, and indexes its pages (lock held).
        At start, a torn tail left by a writer that is gone is cut off."""
        parsed = segs.parse_name(name)
        seg = Segment(parsed[0], parsed[3]) if parsed else Segment("", 0)
        self.segments[name] = seg
        alive = parsed is not None and disk.writer_alive(parsed[1], parsed[2])
        if alive and seg.owner != self.owner:
            last = self.newest.get(seg.owner, "")
            newest = self.segments.get(last)
            if newest is None or newest.seq < seg.seq:
                self.newest[seg.owner] = name
                if newest is not None:  # its writer moved on: read what it added last
                    self.read_on(last, newest)
        self.read_on(name, seg, trim=at_start and parsed is not None and not alive)

    def read_on(self, name: str, seg: Segment, trim: bool = False) -> None:
        """Indexes the pages of segment `name` past what was read of it (lock held)."""
        path = self.folder / name
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # removed by another store
            self.forget(name)
            return
        try:
            st = os.fstat(fd)
            magic = len(segs.MAGIC)
            if st.st_size > seg.end and st.st_size >= magic:
                read = segs.Reader(fd, st.st_size)
                if seg.end == 0 and read(0, magic) != segs.MAGIC:
                    seg.end = st.st_size  # not a segment: counted, evictable, never read
                else:
                    found, seg.end = segs.scan(read, max(seg.end, magic), st.st_size)
                    for entry in found:
                        self.put(name, seg, *entry)
                    if trim and seg.end < st.st_size and segs.torn(read, seg.end, st.st_size):
                        with contextlib.suppress(OSError):
                            os.truncate(path, seg.end)
                            st = os.fstat(fd)
            self.account(seg, st)
        finally:
            os.close(fd)

    def refresh(self) -> None:
        """Finds what other stores wrote since the last look (lock held)."""
        st = os.stat(self.folder)
        if st.st_mtime_ns != self._listed_ns or st.st_mtime >= self._listed_at - MTIME_SLACK_S:
            self._listed_ns, self._listed_at = st.st_mtime_ns, time.time()
            on_disk = set(os.listdir(self.folder))
            for name, seg in list(self.segments.items()):
                # This store's own: one being made is not listed yet; see `_check_open`.
                if name not in on_disk and seg.owner != self.owner:
                    self.forget(name)
            for name in sorted(on_disk - self.segments.keys() - self.stuck.keys()):
                self.load(name)
            self.count_folders()
        for name in list(self.newest.values()):
            newest = self.segments.get(name)
            try:
                size = os.stat(self.folder / name).st_size
            except FileNotFoundError:
                self.forget(name)
                continue
            if newest is not None and size > newest.end:
                self.read_on(name, newest)

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
        seg = self.segments[name]
        try:
            os.unlink(self.folder / name)
        except FileNotFoundError:
            pass  # another store removed it
        except OSError:
            self.stuck[name] = seg.disk  # its bytes stay counted; remove the next one
            self.segment_disk -= seg.disk
            seg.disk = 0
        self.evicted += len(seg.names) if evicted else 0
        self.forget(name)

    def account(self, seg: Segment, st: os.stat_result) -> None:
        size = disk.disk_bytes(st, self.block_bytes)
        self.segment_disk += size - seg.disk
        seg.disk = size

    def count_folders(self) -> None:
        self.folder_bytes = sum(
            disk.disk_bytes(os.stat(d), self.block_bytes) for d in (self.directory, self.folder)
        )

    def used(self) -> int:
        stuck = sum(self.stuck.values())
        return self.folder_bytes + self.segment_disk + stuck + self.reserved

    def make_room(self, num_bytes: int, keep: str | None = None) -> bool:
        """Removes LRU segments (not `keep`) until `num_bytes` more fit (lock held)."""
        if self.max_bytes is None:
            return True
        if self.folder_bytes + num_bytes > self.max_bytes:
            return False  # would not fit in an empty store: remove nothing
        while self.used() + num_bytes > self.max_bytes:
            victim = next((name for name in self.segments if name != keep), None)
            if victim is None:
                return False
            self.remove(victim, evicted=True)
        return True

    def close_open(self) -> None:
        if self.open_fd >= 0:
            os.close(self.open_fd)
        self.open, self.open_fd = None, -1
