"""An agentic coding trace synthesised offline by `aiperf` (`aiperf synthesize agentic-code`
with a seed), converted to a Mooncake trace `uniradix replay` reads.

aiperf's turns list only their *new* 512-token blocks (`hash_ids`, the last one partial) and
their new tokens (`input_length`); a turn's first row has a `timestamp` (ms), later ones a
`delay` (ms) after the turn before. A session's turn k is sent with its whole context:
the blocks of turns 1..k concatenated, each earlier turn's last block counted as a whole
block (the next turn's blocks start after it), so its length is 512 x the earlier blocks plus
its own `input_length`.

    .venv/bin/python -m benchmarks.traces.aiperf_agentic --seed 1 [--sessions 6] OUT.jsonl

`aiperf` is looked up beside this Python, then on PATH, then in `$AIPERF`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks.traces.trace_io import cache_dir, write_jsonl
from uniradix.sim.traces import MOONCAKE_BLOCK_SIZE

SESSIONS = 3


def convert(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mooncake rows (whole contexts, absolute timestamps, sorted) of aiperf's rows."""
    blocks: dict[str, list[int]] = {}
    clock: dict[str, float] = {}
    out = []
    for i, row in enumerate(rows):
        sid = row.get("session_id")
        new = row.get("hash_ids")
        length = row.get("input_length")
        if not isinstance(sid, str) or not isinstance(new, list) or not isinstance(length, int):
            raise ValueError(
                f"aiperf row {i}: needs session_id, hash_ids, input_length: {row!r:.80}"
            )
        if sid not in blocks:
            blocks[sid], clock[sid] = [], float(row.get("timestamp", 0.0))
        else:
            clock[sid] += float(row.get("delay", 0.0))
        earlier = len(blocks[sid])
        blocks[sid] = blocks[sid] + [int(h) for h in new]
        out.append(
            {
                "timestamp": clock[sid],
                "input_length": earlier * MOONCAKE_BLOCK_SIZE + length,
                "output_length": int(row.get("output_length", 1)),
                "hash_ids": blocks[sid],
                "session_id": sid,
            }
        )
    out.sort(key=lambda r: r["timestamp"])  # stable: a session's turns keep their order
    return out


def find_aiperf() -> str | None:
    beside = Path(sys.executable).parent / "aiperf"
    if beside.exists():
        return str(beside)
    return shutil.which("aiperf") or os.environ.get("AIPERF")


def synthesize(aiperf: str, seed: int, sessions: int) -> list[dict[str, Any]]:
    """aiperf's own rows for `sessions` sessions drawn with `seed`."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [aiperf, "synthesize", "agentic-code", "--num-sessions", str(sessions)]
            + ["--seed", str(seed), "--output", tmp],
            check=True,
            capture_output=True,
            timeout=600,
        )
        found = sorted(Path(tmp).glob("*/dataset.jsonl"))
        if not found:
            raise RuntimeError(f"aiperf wrote no dataset.jsonl under {tmp}")
        return [json.loads(line) for line in found[0].read_text().splitlines() if line.strip()]


def trace(seed: int, log: list[str], sessions: int = SESSIONS) -> Path | None:
    """The converted trace of `sessions` sessions with `seed` (cached); None, said in `log`,
    where aiperf is not installed."""
    path = cache_dir() / f"aiperf_agentic_{sessions}s_s{seed}.jsonl"
    if path.exists():
        return path
    aiperf = find_aiperf()
    if aiperf is None:
        log.append("aiperf_agentic: `aiperf` not found (pip install aiperf, or set $AIPERF)")
        return None
    return write_jsonl(path, convert(synthesize(aiperf, seed, sessions)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sessions", type=int, default=SESSIONS)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    aiperf = find_aiperf()
    if aiperf is None:
        print("aiperf not found (pip install aiperf, or set $AIPERF)", file=sys.stderr)
        return 2
    write_jsonl(args.out, convert(synthesize(aiperf, args.seed, args.sessions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
