"""L3 repairs itself: a page that fails verification is deleted so the next backup writes
it again (a crashed writer's torn segment tail: `tests/storage/test_file_backend.py`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from uniradix.sim.replay import ReplayOptions, run_replay
from uniradix.storage.file_segments import MAGIC, Reader, scan

SMALL = dict(config="full", page_size=16, max_requests=60, full_tokens=3000, host_tokens=6000)


def replay(url: str) -> dict:  # type: ignore[type-arg]
    options = ReplayOptions.of(**SMALL, storage_url=url, check_invariants=True, progress=False)
    return run_replay(options).summary  # type: ignore[arg-type]


def corrupt_every_tenth_page(directory: Path) -> int:
    pages = []  # (page name, segment, offset of the page's last byte)
    for path in (directory / "segments").iterdir():
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            found, _ = scan(Reader(f.fileno(), size), len(MAGIC), size)
        pages += [(name, path, offset + length - 1) for name, offset, length in found]
    for _, path, last in sorted(pages)[::10]:  # by name: spread over the chains
        data = bytearray(path.read_bytes())
        data[last] ^= 0xFF  # a flipped bit of the checksum (simulation pages have no payload)
        path.write_bytes(bytes(data))
    return len(pages[::10])


def test_corrupt_pages_are_deleted_and_written_again(tmp_path: Path) -> None:
    clean, dirty = tmp_path / "clean", tmp_path / "dirty"
    replay(f"file://{clean}")
    shutil.copytree(clean, dirty)
    num_corrupt = corrupt_every_tenth_page(dirty)
    assert num_corrupt > 10
    on_clean = replay(f"file://{clean}")
    on_dirty = replay(f"file://{dirty}")
    store = on_dirty["storage"]
    assert store["pages_corrupt"] > 0 and store["pages_repaired"] == store["pages_corrupt"]
    assert on_clean["storage"]["pages_corrupt"] == 0
    assert on_dirty["hit_rate"] <= on_clean["hit_rate"]  # a corrupt page ends its prefix
    assert on_dirty["leaked"] == {"full": 0, "host_full": 0, "req": 0}
    # The run that met them deleted them and its backups wrote them again: the next run
    # finds no corrupt page left and hits as on the clean store (the store never recovered
    # before: a corrupt page stayed on disk and every later backup kept it).
    again = replay(f"file://{dirty}")
    assert again["storage"]["pages_corrupt"] == 0
    assert again["hit_rate"] >= 0.95 * on_clean["hit_rate"]
