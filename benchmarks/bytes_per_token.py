"""Bytes of memory per cached token: uniradix against SGLang's Rust (and Python) tree core.

    .venv/bin/python -m benchmarks.bytes_per_token [--sizes 1000000,10000000]
        [--pages 1,16] [--sides uniradix,rust] [--out benchmarks/results/bytes_per_token.md]

Needs SGLang 0.5.23 in .venv for the SGLang sides (scripts/setup_sglang.sh; CPU, GPU modules
stubbed as in `benchmarks/sglang_cores.py`). Every cell (side, page size, tree size) fills a
fresh cache, FULL attention only, with the same content: unrelated 256-token sequences of
seeded random tokens (vocabulary 32,000) up to the tree size, inserted through the same code
(`benchmarks.scale._insert`), the pool already built and roomy enough that nothing is
evicted. Two figures per cell, each from its own subprocess, so that neither sees the
other's memory or the cells before it:

- RSS: the process's resident memory growth over the fill, per cached token. It sees every
  heap (Python objects, numpy buffers, the Rust core's native allocations) and is the figure
  to compare across sides; coarse (4 KiB pages, allocator slack).
- heap: the Python heap growth (`tracemalloc`, its own pass: tracing costs memory itself),
  per cached token. Blind to native heaps, so near 0 for the Rust core.

The content is generated before the baseline is taken, so neither figure counts it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import platform
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SEQ_TOKENS = 256
VOCAB = 32000
SEED = 0
SIDES = ("uniradix", "rust", "python")


def _adapter(side: str, page_size: int, pool_tokens: int) -> Any:
    if side == "uniradix":
        from benchmarks.uniradix_side import build_full

        return build_full(page_size, pool_tokens)
    # SGLang reads its tree core from the environment when it is imported.
    os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] = side
    sys.path.insert(0, str(REPO / "benchmarks" / "peer"))
    from benchmarks.peer.sglang_driver import SGLangAdapter, build_cache

    return SGLangAdapter(build_cache("full", page_size, pool_tokens), page_size)


def _trim_heap() -> None:
    """Hands the C heap's free memory back to the system (glibc), so that the fill cannot
    reuse pages freed while the cache was built, unseen by the RSS figure."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: the figure may read low
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def measure_cell(side: str, page_size: int, size: int, heap: bool) -> dict[str, Any]:
    """Fills one cache with `size` tokens; the memory growth per cached token (see module)."""
    from benchmarks.ops import _rss_bytes
    from benchmarks.scale import _insert

    content = np.random.default_rng(SEED).integers(0, VOCAB, (size // SEQ_TOKENS, SEQ_TOKENS))
    adapter = _adapter(side, page_size, size + SEQ_TOKENS)
    gc.collect()
    _trim_heap()
    rss0 = _rss_bytes()
    if heap:
        tracemalloc.start()
    for row in content:
        _insert(adapter, row.tolist())
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] if heap else _rss_bytes() - rss0
    tracemalloc.stop()
    adapter.check()
    tokens = adapter.cached_tokens()
    core = getattr(adapter.cache, "tree_core", None)
    return {
        "side": side,
        "page_size": page_size,
        "cached_tokens": tokens,
        "bytes_per_token": grown / tokens,
        "class": type(core).__name__ if core is not None else type(adapter.cache).__name__,
    }


def _run_cell(side: str, page_size: int, size: int, heap: bool) -> dict[str, Any]:
    cmd = [sys.executable, "-W", "ignore", "-m", "benchmarks.bytes_per_token"]
    cmd += ["--cell", f"{side},{page_size},{size},{int(heap)}"]
    done = subprocess.run(cmd, check=True, cwd=REPO, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def table(rows: list[dict[str, Any]], command: str) -> str:
    lines = [
        "# Bytes per cached token: uniradix vs SGLang's tree cores",
        "",
        f"Command: `{command}`  ",
        f"Machine: {platform.platform()}, Python {platform.python_version()}",
        "",
        "FULL attention, no eviction; content: unrelated 256-token sequences of random tokens"
        " (the same on every side). RSS: resident memory growth over the fill per cached"
        " token (sees native heaps; the figure to compare). heap: Python heap growth"
        " (tracemalloc, its own pass; blind to the Rust core's native heap).",
        "",
        "| side | core | page | cached tokens | RSS B/token | heap B/token | RSS vs rust |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    rust = {(r["page_size"], r["size"]): r["rss"] for r in rows if r["side"] == "rust"}
    for r in rows:
        ref = rust.get((r["page_size"], r["size"]))
        ratio = f"{r['rss'] / ref:.2f}" if ref else "-"
        lines.append(
            f"| {r['side']} | {r['class']} | {r['page_size']} | {r['cached_tokens']:,} |"
            f" {r['rss']:.1f} | {r['heap']:.1f} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000000,10000000")
    p.add_argument("--pages", default="1,16")
    p.add_argument("--sides", default="uniradix,rust")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks/results/bytes_per_token.md")
    p.add_argument("--cell", help=argparse.SUPPRESS)  # side,page,size,heap: one subprocess
    args = p.parse_args(argv)
    if args.cell:
        side, page, size, heap = args.cell.split(",")
        print(json.dumps(measure_cell(side, int(page), int(size), heap == "1")))
        return
    sides = args.sides.split(",")
    unknown = [s for s in sides if s not in SIDES]
    if unknown:
        raise SystemExit(f"unknown side {unknown[0]!r}: choose from {', '.join(SIDES)}")
    rows = []
    for size in (int(x) for x in args.sizes.split(",")):
        for page in (int(x) for x in args.pages.split(",")):
            for side in sides:
                rss, heap = _run_cell(side, page, size, False), _run_cell(side, page, size, True)
                row = {**rss, "size": size, "rss": rss["bytes_per_token"]}
                rows.append({**row, "heap": heap["bytes_per_token"]})
                print(json.dumps(rows[-1]), flush=True)
    args_text = " ".join(sys.argv[1:] if argv is None else argv)
    text = table(rows, f"python -m benchmarks.bytes_per_token {args_text}".strip())
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
