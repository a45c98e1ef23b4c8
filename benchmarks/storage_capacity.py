"""What the file store's byte cap holds on disk: many small pages under a cap.

Writes `--pages` pages of `--page-bytes` payload (default 8 bytes: with the page header a
72-byte page, the simulation's size) in batches of 64 into a file store with each `--cap`,
then reports the pages it holds, the bytes it counts (`used_bytes`) and what the directory
uses on disk as `du` counts it (allocated blocks of the folders and files). Run from the
repository root: `python -m benchmarks.storage_capacity [--caps 100K 2M] [--pages 30000]`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from uniradix.key import RadixKey
from uniradix.storage import KeySpace
from uniradix.storage.file_backend import FileBackend, parse_bytes

KS = KeySpace("bench/model@rev", "bfloat16", "layer_first", 1, "full")
BATCH = 64


def du_bytes(directory: Path) -> int:
    """Allocated blocks of `directory` and everything under it, as `du` counts them."""
    total = directory.lstat().st_blocks * 512
    for root, dirs, files in os.walk(directory):
        total += sum((Path(root) / e).lstat().st_blocks * 512 for e in dirs + files)
    return total


def fill(directory: Path, cap: int, num_pages: int, page_bytes: int) -> dict[str, int]:
    store = FileBackend(directory, max_bytes=cap)
    keys = KS.keys_for(RadixKey(list(range(num_pages))))
    payload = b"\x07" * page_bytes
    for i in range(0, num_pages, BATCH):
        batch = keys[i : i + BATCH]
        store.batch_set(batch, [payload] * len(batch))
    held = sum(1 for _ in (directory / "pages").rglob("*.page"))
    out = {"cap": cap, "pages": held, "counted": store.used_bytes, "du": du_bytes(directory)}
    store.close()
    return out


def render(rows: list[dict[str, int]], num_pages: int, page_bytes: int) -> str:
    lines = [
        f"{num_pages:,} pages of {page_bytes} payload bytes written, batches of {BATCH}",
        "",
        "| cap (bytes) | pages held | bytes counted | bytes on disk (du) | du / cap |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['cap']:,} | {r['pages']:,} | {r['counted']:,} | {r['du']:,} "
            f"| {r['du'] / r['cap']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--caps", nargs="+", default=["100K", "2M"], help="byte caps")
    parser.add_argument("--pages", type=int, default=30_000, help="pages written per cap")
    parser.add_argument("--page-bytes", type=int, default=8, help="payload bytes per page")
    parser.add_argument("--dir", help="parent of the stores (default: a temp dir)")
    args = parser.parse_args()
    rows = []
    for cap in args.caps:
        with tempfile.TemporaryDirectory(prefix="uniradix-cap-", dir=args.dir) as tmp:
            rows.append(fill(Path(tmp), parse_bytes(cap), args.pages, args.page_bytes))
    print(render(rows, args.pages, args.page_bytes))


if __name__ == "__main__":
    main()
