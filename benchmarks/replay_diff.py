"""Checks that two replays produced the same results, timings aside.

    .venv/bin/python -m benchmarks.replay_diff BEFORE.json AFTER.json [...pairs]

Each file is the output of `uniradix replay ... --json`. Prints `identical` per pair, or every
differing field, and exits 1 if any pair differs. Timing fields (`wall_s`, `ideal_s`,
`requests_per_s`) are left out: a speed-up must change nothing else.
`benchmarks/replay_cpu.py` runs two source trees interleaved and compares them the same way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TIMINGS = frozenset({"wall_s", "ideal_s", "requests_per_s"})


def without_timings(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: without_timings(v) for k, v in doc.items() if k not in TIMINGS}
    if isinstance(doc, list):
        return [without_timings(v) for v in doc]
    return doc


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            out += differences(a.get(k), b.get(k), f"{path}.{k}")
        return out
    return [] if a == b else [f"{path or '.'}: {a!r:.80} != {b!r:.80}"]


def main(argv: list[str]) -> int:
    if not argv or len(argv) % 2:
        raise SystemExit(__doc__)
    failed = False
    for before, after in zip(argv[::2], argv[1::2], strict=True):
        a, b = (without_timings(json.loads(Path(p).read_text())) for p in (before, after))
        diff = differences(a, b)
        print(f"{after}: {'identical' if not diff else f'{len(diff)} fields differ'}")
        for line in diff[:20]:
            print("  " + line)
        failed |= bool(diff)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
