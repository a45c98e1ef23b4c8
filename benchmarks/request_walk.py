"""How far one request's walk spreads through the library: files touched, file-to-file hops
and calls from `uniradix/tiers/` back up into `uniradix/cache/`.

Three requests go through `uniradix replay` in this process, one at a time, on a full-only
cache with a host tier (write-through) and a file L3 store, with pools so small that the
third request walks the whole path: its match ends on the host (the first request's prefix
was demoted by the second), it is loaded back, inserted, and its insert evicts the second
request's prefix with demotion and an L3 backup. Every Python call whose caller and callee
are both library files is recorded (`sys.setprofile`); the figures are for the whole replay,
counted once per distinct file or distinct (caller file, callee file) pair.

    .venv/bin/python -m benchmarks.request_walk [--root DIR] [--json]

`--root` measures another checkout (e.g. a worktree of an older commit): its `uniradix` is
imported instead of this one's, through the same CLI flags.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

MOONCAKE_BLOCK = 512
ROWS = (
    {"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]},
    {"timestamp": 1, "input_length": 1024, "output_length": 4, "hash_ids": [3, 4]},
    {"timestamp": 2, "input_length": 1536, "output_length": 4, "hash_ids": [1, 2, 5]},
)


def replay_argv(trace: Path, store: Path) -> list[str]:
    return [
        "replay",
        "--trace",
        str(trace),
        "--config",
        "full",
        "--page-size",
        "16",
        "--full-tokens",
        "1600",
        "--host-tokens",
        "8192",
        "--write-policy",
        "write_through",
        "--storage",
        f"file://{store}",
        "--max-running",
        "1",
        "--json",
        "--no-progress",
    ]


@contextlib.contextmanager
def recorded_calls(package: Path) -> Iterator[set[tuple[str, str]]]:
    """(caller file, callee file) pairs of calls between files under `package` made by the
    last request: from the cache's last `match_prefix` call to its last `cache_finished_req`
    return (one request runs at a time), on every thread."""
    prefix = str(package) + "/"
    cache_dir = prefix + "cache/"
    pairs: list[tuple[str, str]] = []
    window: dict[str, int | None] = {"start": None, "end": None}

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        callee, name = frame.f_code.co_filename, frame.f_code.co_name
        in_cache = callee.startswith(cache_dir)
        if event == "call" and in_cache and name == "match_prefix":
            window["start"] = len(pairs)
        if event == "return" and in_cache and name == "cache_finished_req":
            window["end"] = len(pairs)
        if event != "call" or frame.f_back is None:
            return
        caller = frame.f_back.f_code.co_filename
        if callee.startswith(prefix) and caller.startswith(prefix):
            pairs.append((caller[len(prefix) :], callee[len(prefix) :]))

    last_request: set[tuple[str, str]] = set()
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        yield last_request
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        last_request.update(pairs[window["start"] or 0 : window["end"]])


def walk(root: Path) -> dict[str, Any]:
    sys.path.insert(0, str(root))
    from uniradix.cli import main

    package = Path(sys.modules["uniradix"].__file__ or "").resolve().parent
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        trace.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
        out = io.StringIO()
        with recorded_calls(package) as pairs, contextlib.redirect_stdout(out):
            rc = main(replay_argv(trace, Path(tmp) / "store"))
    if rc != 0:
        raise SystemExit(f"replay failed with exit {rc}")
    summary = json.loads(out.getvalue())
    files = {f for pair in pairs for f in pair}
    hops = {(a, b) for a, b in pairs if a != b}
    core = {f for f in files if not f.startswith(("sim/", "cli"))}
    return {
        "package": str(package),
        "host_hit_tokens": summary.get("hit_tokens_by_tier", {}).get("host"),
        "storage_pages_written": summary.get("storage", {}).get("pages_written"),
        "files_touched": len(files),
        "files_touched_outside_sim_and_cli": len(core),
        "file_to_file_hops": len(hops),
        "calls_back_up_tiers_to_cache": sum(
            a.startswith("tiers/") and b.startswith("cache/") for a, b in hops
        ),
        "files": sorted(files),
        "calls_back_up": sorted(
            f"{a} -> {b}" for a, b in hops if a.startswith("tiers/") and b.startswith("cache/")
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    figures = walk(args.root.resolve())
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for name, value in figures.items():
        if isinstance(value, list):
            value = "\n  " + "\n  ".join(value)
        print(f"{name}: {value}")


if __name__ == "__main__":
    main()
