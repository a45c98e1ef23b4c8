"""The segment files of the file store (`uniradix.storage.file_backend`): many pages in one
file, so a small page costs its bytes on disk, not a filesystem block.

```
segment := MAGIC (8 bytes), then frames
frame   := state (1 byte)  0 (1)  name length (2)  blob length (4)  name  blob
blob    := one page as `page_format` writes it: its header, then its payload
```

- `state` is LIVE for a stored page and DEAD once the page is deleted or failed its
  verification: the byte is overwritten in place, so such a page never comes back when a
  process restarts and reads the segment again.
- `name` is empty for a page stored under its own key (the key's name without its hash
  tag, `ur2.<fingerprint hex>.<digest hex>`, is read back from the page header's two
  digests): a 72-byte page costs 80 bytes. Any other name is kept in the frame.
- Writers only append, each to segments of its own, and a frame is indexed only once its
  last byte is in the file: a frame cut short by a killed writer, or still being written, is
  never read. A scan stops at the first frame that does not fit or has no valid state.
- A segment is named `<host>-<pid>-<instance>-<seq>.seg`: which process writes it (a
  reader knows whether it may still grow) and in what order.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable
from pathlib import Path

from uniradix.hashing.storage_keys import KEY_PREFIX

MAGIC = b"URSEG\x00\x00\x01"
FRAME = struct.Struct("<BBHI")
LIVE, DEAD = 0x4C, 0x00
SUFFIX = ".seg"
# The page header's key-space fingerprint and page digest (`page_format`'s offsets table).
_FINGERPRINT, _DIGEST, _KEY_END = 8, 24, 56
_MAX_NAME = 1024
_WINDOW_BYTES = 64 << 10

Read = Callable[[int, int], bytes]
Entry = tuple[str, int, int]
"""A stored page found by a scan: (name, frame offset, frame length)."""


def name_in_header(header: bytes) -> str | None:
    """The key name a page header was written for, None if it is too short to say."""
    if len(header) < _KEY_END:
        return None
    fingerprint, digest = header[_FINGERPRINT:_DIGEST], header[_DIGEST:_KEY_END]
    return f"{KEY_PREFIX}.{fingerprint.hex()}.{digest.hex()}"


def frame_head(name: str, header: bytes, blob_bytes: int) -> bytes:
    """What goes before a page's blob (`header` + payload, `blob_bytes` long) in a frame."""
    kept = b"" if name_in_header(header) == name else name.encode()
    if len(kept) > _MAX_NAME or blob_bytes >= 1 << 32:
        raise ValueError(f"page {name[:80]!r} of {blob_bytes} bytes does not fit a segment frame")
    return FRAME.pack(LIVE, 0, len(kept), blob_bytes) + kept


def blob_of(frame: bytes) -> memoryview | None:
    """The page blob of a whole frame read back, None if it is dead or not a whole frame."""
    if len(frame) < FRAME.size:
        return None
    state, zero, name_len, blob_len = FRAME.unpack_from(frame)
    if state != LIVE or zero != 0 or FRAME.size + name_len + blob_len != len(frame):
        return None
    return memoryview(frame)[FRAME.size + name_len :]


class Reader:
    """`read(offset, n)` over an open segment, through a window of 64 KiB: a scan reads a
    segment of small pages in a few calls, and of a large page only its head."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd, self._size = fd, size
        self._start, self._data = 0, b""

    def __call__(self, offset: int, n: int) -> bytes:
        at = offset - self._start
        if at < 0 or at + n > len(self._data):
            self._start, at = offset, 0
            self._data = os.pread(self._fd, min(max(n, _WINDOW_BYTES), self._size - offset), offset)
        return self._data[at : at + n]


def scan(read: Read, start: int, size: int) -> tuple[list[Entry], int]:
    """The live pages of the frames from `start` (a frame boundary) up to `size`, and the end
    of the last whole frame (where a torn or garbled tail begins)."""
    found: list[Entry] = []
    offset = start
    while offset + FRAME.size <= size:
        state, zero, name_len, blob_len = FRAME.unpack(read(offset, FRAME.size))
        end = offset + FRAME.size + name_len + blob_len
        if state not in (LIVE, DEAD) or zero != 0 or name_len > _MAX_NAME or end > size:
            break
        if state == LIVE:
            body = offset + FRAME.size
            name: str | None
            if name_len:
                name = read(body, name_len).decode("utf-8", "replace")
            else:
                name = name_in_header(read(body, min(blob_len, _KEY_END)))
            if name is not None:
                found.append((name, offset, end - offset))
        offset = end
    return found, offset


def torn(read: Read, end: int, size: int) -> bool:
    """Whether the bytes from `end` (where `scan` stopped) to `size` are one frame cut short,
    as a writer stopped mid-write leaves it; anything else (a damaged frame) is not."""
    if size - end < FRAME.size:
        return True
    state, zero, name_len, blob_len = FRAME.unpack(read(end, FRAME.size))
    valid = state in (LIVE, DEAD) and zero == 0 and name_len <= _MAX_NAME
    return valid and end + FRAME.size + name_len + blob_len > size


def read_segment(
    path: Path, start: int, trim: bool = False
) -> tuple[list[Entry], int, os.stat_result] | None:
    """The live pages of segment `path` from `start` (a frame boundary; 0: a segment never
    read), where the read stopped, and the file's stat; None if the file is gone. A file
    without the magic is not a segment: no pages, read to its end. With `trim`, a torn tail
    (a writer that is gone) is cut off."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        magic = len(MAGIC)
        if st.st_size <= start or st.st_size < magic:
            return [], start, st
        read = Reader(fd, st.st_size)
        if start == 0 and read(0, magic) != MAGIC:
            return [], st.st_size, st
        found, end = scan(read, max(start, magic), st.st_size)
        if trim and end < st.st_size and torn(read, end, st.st_size):
            with contextlib.suppress(OSError):
                os.truncate(path, end)
                st = os.fstat(fd)
        return found, end, st
    finally:
        os.close(fd)


def segment_name(owner: str, seq: int) -> str:
    return f"{owner}-{seq:08d}{SUFFIX}"


def parse_name(file_name: str) -> tuple[str, str, int, int] | None:
    """(owner, host, pid, seq) of a segment's file name; None for a file not named so."""
    parts = file_name.removesuffix(SUFFIX).rsplit("-", 3)
    if not file_name.endswith(SUFFIX) or len(parts) != 4:
        return None
    host, pid, _, seq = parts
    if not (pid.isdigit() and seq.isdigit()):
        return None
    return file_name[: -len(SUFFIX) - len(seq) - 1], host, int(pid), int(seq)
