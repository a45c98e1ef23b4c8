"""On-disk primitives of the file store (`uniradix.storage.file_backend`): byte sizes,
positioned vectored writes, whether a segment's writer still runs, and block accounting."""

from __future__ import annotations

import os
import socket
from pathlib import Path

HOST = socket.gethostname().replace("-", "_")  # segment names split on dashes
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_bytes(text: str) -> int:
    """`"512M"` -> 536870912; plain integers are bytes."""
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    unit = t[-1:] if t[-1:] in _UNITS else ""
    try:
        value = float(t[: len(t) - len(unit)]) * _UNITS[unit]
    except ValueError:
        raise ValueError(f"not a byte size: {text!r} (examples: 1048576, 512M, 10G)") from None
    if value < 0:
        raise ValueError(f"byte size must be >= 0, got {text!r}")
    return int(value)


def pwrite_all(fd: int, buffers: list[memoryview], offset: int) -> None:
    """Writes `buffers` at `offset`; pwritev may write less than asked: resume where it
    stopped."""
    while buffers:
        n = os.pwritev(fd, buffers, offset)
        offset += n
        while buffers and n >= buffers[0].nbytes:
            n -= buffers[0].nbytes
            buffers.pop(0)
        if buffers:
            buffers[0] = buffers[0][n:]


def writer_alive(host: str, pid: int) -> bool:
    """Whether the process `pid` of `host` that writes a segment may still run: a writer on
    another machine (a shared directory) is assumed to."""
    if host != HOST:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def round_up(num_bytes: int, block: int) -> int:
    return -(-num_bytes // block) * block


def block_bytes(directory: Path) -> int:
    """The allocation unit of the filesystem holding `directory` (4096 if it does not say)."""
    try:
        return os.statvfs(directory).f_frsize or 4096
    except (OSError, AttributeError):  # statvfs is POSIX-only
        return 4096


def disk_bytes(st: os.stat_result, block: int) -> int:
    """What a file takes on disk: its allocated blocks, and at least its size rounded up to
    the block (a write not yet allocated, or a filesystem that reports no blocks)."""
    allocated = getattr(st, "st_blocks", 0) * 512
    return max(allocated, round_up(st.st_size, block))
