"""What the file store's byte cap holds on disk: pages of a given size written past the cap.

For each page size (`--page-bytes`: payload bytes; the 72-byte page header comes on top, so
the default 0 is a 72-byte simulation page) and each `--cap`, writes pages in batches of 64
into an empty file store until twice the cap has been offered (or `--pages`), then reports
the pages it holds (against cap / page size), the bytes it counts (`used_bytes`) and what
the directory uses on disk as `du` counts it (allocated blocks of the folders and files).
Run from the repository root:
`python -m benchmarks.storage_capacity [--caps 100K 2M 64M] [--page-bytes 0 2097080]`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from uniradix.key import RadixKey
from uniradix.storage import KeySpace
from uniradix.storage.file_backend import FileBackend, parse_bytes
from uniradix.storage.page_format import HEADER_BYTES

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
    start = time.perf_counter()
    for i in range(0, num_pages, BATCH):
        batch = keys[i : i + BATCH]
        store.batch_set(batch, [payload] * len(batch))
    wall_ms = int((time.perf_counter() - start) * 1000)
    held = sum(store.batch_exists([k]) for k in keys)
    out = {
        "page": HEADER_BYTES + page_bytes,
        "cap": cap,
        "written": num_pages,
        "pages": held,
        "counted": store.used_bytes,
        "du": du_bytes(directory),
        "wall_ms": wall_ms,
    }
    store.close()
    return out


def pages_to_offer(cap: int, page_bytes: int, limit: int | None) -> int:
    """Twice what the cap could hold, at least one batch; `limit` if given."""
    return limit if limit is not None else max(BATCH, 2 * cap // (HEADER_BYTES + page_bytes))


def render(rows: list[dict[str, int]]) -> str:
    lines = [
        f"Pages written in batches of {BATCH} into an empty store (`written`); the ideal is "
        "cap / page bytes.",
        "",
        "| page (bytes) | cap (bytes) | written | pages held | held / ideal | bytes counted "
        "| on disk (du) | du / cap | write wall |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ideal = r["cap"] // r["page"]
        ratio = f"{r['pages'] / ideal:.2f}" if ideal else "-"
        lines.append(
            f"| {r['page']:,} | {r['cap']:,} | {r['written']:,} | {r['pages']:,} | {ratio} "
            f"| {r['counted']:,} | {r['du']:,} | {r['du'] / r['cap']:.2f} "
            f"| {r['wall_ms'] / 1000:.1f} s |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--caps", nargs="+", default=["100K", "2M", "64M"], help="byte caps")
    parser.add_argument(
        "--page-bytes", nargs="+", type=int, default=[0, 2097152 - HEADER_BYTES],
        help="payload bytes per page (default: 72-byte pages and 2 MiB pages)",
    )  # fmt: skip
    parser.add_argument("--pages", type=int, help="pages written per run (default: 2 x cap)")
    parser.add_argument("--dir", help="parent of the stores (default: a temp dir)")
    args = parser.parse_args()
    rows = []
    for page_bytes in args.page_bytes:
        for text in args.caps:
            cap = parse_bytes(text)
            num_pages = pages_to_offer(cap, page_bytes, args.pages)
            with tempfile.TemporaryDirectory(prefix="uniradix-cap-", dir=args.dir) as tmp:
                rows.append(fill(Path(tmp), cap, num_pages, page_bytes))
    print(render(rows))


if __name__ == "__main__":
    main()
