"""L3 repairs itself: a page that fails verification is deleted so the next backup writes
it again (a crashed writer's torn segment tail: `tests/storage/test_file_backend.py`)."""

from __future__ import annotations

import shutil
from pathlib import Path

from benchmarks.l3_repair import corrupt_every_tenth_page
from uniradix.sim.replay import ReplayOptions, run_replay

SMALL = dict(config="full", page_size=16, max_requests=60, full_tokens=3000, host_tokens=6000)


def replay(url: str) -> dict:  # type: ignore[type-arg]
    options = ReplayOptions.of(**SMALL, storage_url=url, check_invariants=True, progress=False)
    return run_replay(options).summary  # type: ignore[arg-type]


def test_corrupt_pages_are_deleted_and_written_again(tmp_path: Path) -> None:
    clean, dirty = tmp_path / "clean", tmp_path / "dirty"
    replay(f"file://{clean}")
    shutil.copytree(clean, dirty)
    num_corrupt = corrupt_every_tenth_page(dirty)[1]
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
