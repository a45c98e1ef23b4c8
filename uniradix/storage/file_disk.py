"""On-disk primitives of the file store (`uniradix.storage.file_backend`): byte sizes,
vectored writes, temp-file ownership, shard names, block accounting and the atomic rename."""

from __future__ import annotations

import os
import socket
from pathlib import Path

HOST = socket.gethostname().replace(".", "_")  # temp file names split on dots
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


def write_all(fd: int, buffers: list[memoryview]) -> None:
    # writev may write less than asked; resume where it stopped.
    while buffers:
        n = os.writev(fd, buffers)
        while buffers and n >= buffers[0].nbytes:
            n -= buffers[0].nbytes
            buffers.pop(0)
        if buffers:
            buffers[0] = buffers[0][n:]


def writer_alive(tmp_name: str) -> bool:
    """Whether the process that wrote temp file `<name>.<host>-<pid>.<uuid>.tmp` may still
    run: a writer on another machine (a shared directory) is assumed to."""
    parts = tmp_name.split(".")
    host, _, pid_text = parts[-3].rpartition("-") if len(parts) >= 3 else ("", "", "")
    if host != HOST or not pid_text.isdigit():
        return True  # another machine's writer, or not a name of ours: left to its age
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def shard(name: str) -> str:
    return name[-64:-62]


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


def publish(tmp: Path, final: Path) -> None:
    """Renames a written temp file into its shard folder, making the folder if needed; the
    folder may be removed meanwhile by a process that evicted its last page: retry."""
    for attempt in range(5):
        try:
            # mkdir(exist_ok) raises FileExistsError too if the folder goes after its EEXIST.
            final.parent.mkdir(exist_ok=True)
            os.replace(tmp, final)
            return
        except (FileNotFoundError, FileExistsError):
            if attempt == 4 or not tmp.exists():
                raise
