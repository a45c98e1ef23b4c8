"""The file store repairs itself: hit rates of a clean store, of a copy with every tenth page
corrupted (the run that meets them), and of the runs after it.

A replay fills a file store; the store is copied and one bit of every tenth page's checksum
is flipped in the copy (pages sorted by name, so the corruption spreads over the chains);
then the same replay runs on the clean store and, several times, on the corrupted copy.
Target: the second run on the corrupted copy reaches >= 0.95x the clean store's hit rate.

    python -m benchmarks.l3_repair [--requests 60] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from uniradix.sim.replay import ReplayOptions, run_replay
from uniradix.storage.file_segments import MAGIC, Reader, scan


def replay(url: str, requests: int) -> dict[str, Any]:
    options = ReplayOptions.of(
        config="full", page_size=16, max_requests=requests, full_tokens=3000,
        host_tokens=6000, storage_url=url, check_invariants=True, progress=False,
    )  # fmt: skip
    summary: dict[str, Any] = run_replay(options).summary  # type: ignore[assignment]
    return summary


def corrupt_every_tenth_page(directory: Path) -> tuple[int, int]:
    """Flips the last byte (the checksum's) of every tenth page: (pages, pages corrupted)."""
    pages = []
    for path in (directory / "segments").iterdir():
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            found, _ = scan(Reader(f.fileno(), size), len(MAGIC), size)
        pages += [(name, path, offset + length - 1) for name, offset, length in found]
    for _, path, last in sorted(pages)[::10]:
        data = bytearray(path.read_bytes())
        data[last] ^= 0xFF
        path.write_bytes(bytes(data))
    return len(pages), len(pages[::10])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--runs", type=int, default=3, help="runs on the corrupted copy")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="uniradix-l3-repair-"))
    try:
        clean, dirty = work / "clean", work / "dirty"
        replay(f"file://{clean}", args.requests)
        shutil.copytree(clean, dirty)
        num_pages, num_corrupt = corrupt_every_tenth_page(dirty)
        on_clean = replay(f"file://{clean}", args.requests)["hit_rate"]
        print(f"store: {num_pages:,} pages, {num_corrupt:,} corrupted (every tenth)")
        print(f"clean store, second run: hit rate {on_clean:.4f}")
        for run in range(1, args.runs + 1):
            summary = replay(f"file://{dirty}", args.requests)
            s = summary["storage"]
            print(
                f"corrupted copy, run {run}: hit rate {summary['hit_rate']:.4f} "
                f"({summary['hit_rate'] / on_clean:.3f}x clean), pages corrupt "
                f"{s['pages_corrupt']:,}, repaired {s['pages_repaired']:,}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
