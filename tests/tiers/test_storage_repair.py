"""L3 repairs itself: a page that fails verification is deleted so the next backup writes
it again, and temp files left by a writer that died are removed at start."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from uniradix.sim.replay import ReplayOptions, run_replay
from uniradix.storage.file_backend import FileBackend
from uniradix.storage.file_disk import HOST

SMALL = dict(config="full", page_size=16, max_requests=60, full_tokens=3000, host_tokens=6000)


def replay(url: str) -> dict:  # type: ignore[type-arg]
    options = ReplayOptions.of(**SMALL, storage_url=url, check_invariants=True, progress=False)
    return run_replay(options).summary  # type: ignore[arg-type]


def corrupt_every_tenth_page(directory: Path) -> int:
    pages = sorted((directory / "pages").rglob("*.page"))
    for page in pages[::10]:
        data = bytearray(page.read_bytes())
        data[-1] ^= 0xFF  # a flipped bit of the checksum (simulation pages have no payload)
        page.write_bytes(bytes(data))
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


def test_temp_files_of_a_dead_writer_are_removed_at_start(tmp_path: Path) -> None:
    FileBackend(tmp_path).close()
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    dead_pid = int(done.stdout)
    tmp = tmp_path / "tmp"
    dead = tmp / f"ur1.abc.{HOST}-{dead_pid}.0123abcd.tmp"
    alive = tmp / f"ur1.abc.{HOST}-{os.getpid()}.0123abcd.tmp"
    elsewhere = tmp / f"ur1.abc.otherhost-{dead_pid}.0123abcd.tmp"
    for path in (dead, alive, elsewhere):
        path.write_bytes(b"half a page")
    FileBackend(tmp_path).close()
    assert not dead.exists()
    assert alive.exists() and elsewhere.exists()  # a running writer's, another machine's
