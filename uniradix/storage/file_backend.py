"""`file://DIR`: the embedded L3, one file per page under a directory, with a byte cap.

Layout: `DIR/pages/<2 hex>/<key name>.page` (256 shard folders keep directories small) and
`DIR/tmp/` for writes in progress.

- **Atomic publish.** A page is written to a temp file in `DIR/tmp/` and renamed into place,
  so a reader (or a process started after a crash) sees a whole page or none. A temp file
  left by a killed writer is never read, and is removed at the next start when its writer
  (host and pid in its name) is gone or it is older than `STALE_TMP_S`.
- **Self-repair.** A page that fails verification is unlinked (`StorageBackend.batch_get`),
  so the next backup writes it again instead of finding it stored.
- **fsync policy.** Off by default: L3 is a cache, and a page torn by a power loss fails its
  header or checksum and reads as a miss, never as data. `fsync=1` syncs each page before the
  rename and the shard folder after it, for pages that must survive a power loss.
- **Byte cap, LRU.** The cap counts what the filesystem allocates, as `du` does: each page
  file's blocks (`st_blocks`, at least its size rounded up to the filesystem's block), the
  shard folders in use and the store's own folders. Before a write, room is made by
  unlinking the least recently used pages (a hit refreshes a page; an un-removable file is
  set aside, never blocks eviction; a shard folder left empty is removed), and the blocks
  are reserved until the write ends, so the store plus the writes in flight never use more
  than the cap. Small pages still take a whole block each: a 72-byte page costs 4 KiB.
- **Shared directory.** At start the index is rebuilt from the directory, oldest file
  first, so a new process hits what an earlier one wrote; a page written meanwhile by another
  process is found by its path and adopted. The cap is enforced on what this process sees.
  A shard folder emptied by one process's eviction is removed; a writer of another process
  that loses its folder between making it and renaming into it makes it again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from pathlib import Path
from urllib.parse import unquote, urlsplit

from uniradix.storage import file_disk as disk
from uniradix.storage.backend import (
    BREAKER_OPTIONS,
    StorageBackend,
    StoredPage,
    breaker_from_options,
    register_backend,
    url_options,
)
from uniradix.storage.breaker import CircuitBreaker
from uniradix.storage.file_disk import parse_bytes
from uniradix.storage.page_format import Payload

STALE_TMP_S = 60.0
_SUFFIX = ".page"


class FileBackend(StorageBackend):
    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        max_bytes: int | None = None,
        fsync: bool = False,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        super().__init__(breaker)
        if max_bytes is not None and max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1 or None, got {max_bytes}")
        self._owns_dir = directory is None
        self.directory = Path(
            tempfile.mkdtemp(prefix="uniradix-l3-") if directory is None else directory
        )
        self.max_bytes = max_bytes
        self.fsync = fsync
        self._pages_dir = self.directory / "pages"
        self._tmp_dir = self.directory / "tmp"
        self._pages_dir.mkdir(parents=True, exist_ok=True)
        self._tmp_dir.mkdir(exist_ok=True)
        self._index_lock = threading.Lock()
        self.block_bytes = disk.block_bytes(self.directory)
        self._index: OrderedDict[str, int] = OrderedDict()  # name -> disk bytes, LRU first
        self._stuck: dict[str, int] = {}  # pages whose unlink failed: still on disk
        self._shard_pages: dict[str, int] = {}  # shard -> indexed + stuck pages in it
        self._shard_bytes: dict[str, int] = {}  # shard -> its folder's disk bytes
        # The store's own folders, then indexed + stuck pages and shard folders.
        self._used_bytes = sum(disk.disk_bytes(os.stat(d), self.block_bytes) for d in self._dirs())
        self._reserved_bytes = 0  # writes in flight
        self._evicted = 0
        self._rebuild_index()

    # -- paths and index -------------------------------------------------------------------

    def _path(self, name: str) -> Path:
        return self._pages_dir / disk.shard(name) / (name + _SUFFIX)

    def _dirs(self) -> list[Path]:
        return [self.directory, self._pages_dir, self._tmp_dir]

    def _page_entries(self) -> list[os.DirEntry[str]]:
        entries: list[os.DirEntry[str]] = []
        for shard in self._pages_dir.iterdir():
            # Another process removes a shard folder when it evicts the folder's last page.
            with contextlib.suppress(FileNotFoundError), os.scandir(shard) as it:
                entries += [e for e in it if e.name.endswith(_SUFFIX)]
        return entries

    def _rebuild_index(self) -> None:
        found: list[tuple[float, str, int]] = []
        for entry in self._page_entries():
            try:
                st = entry.stat()
            except FileNotFoundError:  # another process evicted it meanwhile
                continue
            size = disk.disk_bytes(st, self.block_bytes)
            found.append((st.st_mtime, entry.name[: -len(_SUFFIX)], size))
        for _, name, size in sorted(found):
            self._index[name] = size
            self._used_bytes += size
            self._enter_shard(disk.shard(name))
        for shard in self._pages_dir.iterdir():  # folders emptied before a crash
            if shard.name not in self._shard_pages:
                self._shard_pages[shard.name] = 1
                self._refresh_shard(shard.name)
                self._leave_shard(shard.name)
        now = time.time()
        for entry in os.scandir(self._tmp_dir):
            with contextlib.suppress(FileNotFoundError):  # its writer renamed it meanwhile
                if not disk.writer_alive(entry.name) or now - entry.stat().st_mtime > STALE_TMP_S:
                    Path(entry.path).unlink(missing_ok=True)
        with self._index_lock:
            self._make_room(0)

    def _adopt(self, name: str) -> bool:
        """Indexes a page found on disk but not in the index (written by another process,
        or published by a writer of this one that has not indexed it yet); False if it is
        not there. Caller holds the index lock: the stat happens under it, so a page this
        process evicts meanwhile is never indexed again."""
        if name in self._index:
            return True
        try:
            size = disk.disk_bytes(self._path(name).stat(), self.block_bytes)
        except FileNotFoundError:
            return False
        self._index[name] = size
        self._used_bytes += size
        self._enter_shard(disk.shard(name))
        self._make_room(0)
        return True

    def _drop(self, name: str) -> None:
        size = self._index.pop(name, None)
        if size is not None:
            self._used_bytes -= size
            self._leave_shard(disk.shard(name))

    def _enter_shard(self, shard: str) -> None:
        """Counts one more page in `shard`, and the folder's blocks: it grows with entries."""
        self._shard_pages[shard] = self._shard_pages.get(shard, 0) + 1
        self._refresh_shard(shard)

    def _refresh_shard(self, shard: str) -> None:
        try:
            size = disk.disk_bytes((self._pages_dir / shard).stat(), self.block_bytes)
        except FileNotFoundError:  # removed by another process; its page was counted gone
            size = 0
        self._used_bytes += size - self._shard_bytes.get(shard, 0)
        self._shard_bytes[shard] = size

    def _leave_shard(self, shard: str) -> None:
        """Counts one page fewer in `shard`; its last page gone, the folder is removed (a
        folder holding another process's pages stays, and stays counted)."""
        self._shard_pages[shard] -= 1
        if self._shard_pages[shard] > 0:
            return
        with contextlib.suppress(FileNotFoundError):
            try:
                (self._pages_dir / shard).rmdir()
            except OSError:
                self._shard_pages[shard] = 0
                return
        del self._shard_pages[shard]
        self._used_bytes -= self._shard_bytes.pop(shard, 0)

    def _make_room(self, num_bytes: int) -> bool:
        """Unlinks LRU pages until `num_bytes` more fit under the cap (index lock held)."""
        if self.max_bytes is None:
            return True
        while self._used_bytes + self._reserved_bytes + num_bytes > self.max_bytes and self._index:
            name, size = self._index.popitem(last=False)
            try:
                self._path(name).unlink()
            except FileNotFoundError:
                pass  # another process removed it
            except OSError:
                self._stuck[name] = size  # its bytes stay counted; evict the next one
                continue
            self._used_bytes -= size
            self._leave_shard(disk.shard(name))
            self._evicted += 1
        return self._used_bytes + self._reserved_bytes + num_bytes <= self.max_bytes

    # -- store operations --------------------------------------------------------------------

    def _store_exists_prefix(self, names: list[str]) -> int:
        with self._index_lock:
            for i, name in enumerate(names):
                if not self._adopt(name):
                    return i
        return len(names)

    def _store_get(self, names: list[str]) -> list[StoredPage | None]:
        out: list[StoredPage | None] = []
        for name in names:
            path = self._path(name)
            try:
                with open(path, "rb", buffering=0) as f:
                    data = f.readall()
            except FileNotFoundError:
                with self._index_lock:
                    self._drop(name)
                out.append(None)
                continue
            with self._index_lock:
                if self._adopt(name):
                    self._index.move_to_end(name)
            # The LRU order a restarted process rebuilds; the data is read already, so a page
            # evicted meanwhile or a directory this process may only read loses nothing.
            with contextlib.suppress(OSError):
                os.utime(path)
            out.append(data)
        return out

    def _store_set(self, names: list[str], headers: list[bytes], payloads: list[Payload]) -> int:
        for i, (name, header, payload) in enumerate(zip(names, headers, payloads, strict=True)):
            body = memoryview(payload).cast("B")
            size = disk.round_up(len(header) + body.nbytes, self.block_bytes)
            with self._index_lock:
                if name in self._index:  # a page's bytes are fixed by its key: keep it
                    self._index.move_to_end(name)
                    self._count_kept()
                    continue
                # Its shard folder may have to be made (or made again, if eviction empties
                # and removes it meanwhile): a block for it too.
                size += self.block_bytes
                if not self._make_room(size):
                    return i
                self._reserved_bytes += size
            try:
                self._write_page(name, [memoryview(header), body])
            except Exception:
                with self._index_lock:
                    self._reserved_bytes -= size
                raise
            with self._index_lock:
                self._reserved_bytes -= size
                self._adopt(name)
        return len(names)

    def _write_page(self, name: str, buffers: list[memoryview]) -> None:
        final = self._path(name)
        tmp = self._tmp_dir / f"{name}.{disk.HOST}-{os.getpid()}.{uuid.uuid4().hex}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            disk.write_all(fd, buffers)
            if self.fsync:
                os.fsync(fd)
            os.close(fd)
            fd = -1
            disk.publish(tmp, final)
        except Exception:
            # A failed write leaves nothing behind (a killed process leaves a temp file).
            if fd >= 0:
                os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        if self.fsync:
            dir_fd = os.open(final.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def _store_delete(self, names: list[str]) -> int:
        removed = 0
        for name in names:
            try:
                self._path(name).unlink()
                removed += 1
            except FileNotFoundError:
                pass
            with self._index_lock:
                self._drop(name)
        return removed

    def _store_clear(self) -> None:
        for entry in self._page_entries():
            Path(entry.path).unlink(missing_ok=True)
        with self._index_lock:
            for name, size in list(self._stuck.items()):
                if not self._path(name).exists():  # removable at last
                    del self._stuck[name]
                    self._used_bytes -= size
                    self._leave_shard(disk.shard(name))
            for name in list(self._index):
                self._drop(name)

    def _store_close(self) -> None:
        if self._owns_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _store_evicted_pages(self) -> int:
        return self._evicted

    @property
    def used_bytes(self) -> int:
        """Disk bytes of the store's folders, the indexed pages, the un-removable ones and
        the writes in flight: what `du` shows for the directory once the writes end."""
        with self._index_lock:
            return self._used_bytes + self._reserved_bytes


def _from_url(url: str) -> FileBackend:
    options = url_options(url, {"max_bytes", "fsync"} | BREAKER_OPTIONS)
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
    )


register_backend("file", _from_url)
