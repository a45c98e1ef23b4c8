"""Per-op cost of this checkout against another git ref of uniradix, same stream, same machine.

What it answers: "does a cache built without feature X cost what it did before X landed?"
(e.g. `e7fa5f5^`, the commit before the host tier). The ref is checked out into a detached
worktree under the system temp directory; both trees run the same driver
(`against_ref_driver.py`, which uses only the public API both have: `build_cache`,
`match_prefix`, `inc_lock_ref`, `insert`, `dec_lock_ref`, `evict`) in fresh subprocesses,
alternating ref / this checkout `--rounds` times so that both see the same drift of the
machine's load. Per op, the report gives this checkout's median over the ref's, per round
(paired), as the median and the range over rounds.

Stream: multi-turn chats of full attention (a shared system prompt, turns growing the
history by 60-400 tokens), `--requests` requests, a pool a quarter of the stream's distinct
tokens, so eviction runs.

Run: `python -m benchmarks.against_ref e7fa5f5^ [--rounds 7] [--page-sizes 1 16]`
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

OPS = ("match", "lock", "insert", "unlock", "evict")
ROOT = Path(__file__).resolve().parent.parent

DRIVER = Path(__file__).with_name("against_ref_driver.py")


def worktree_of(ref: str) -> Path:
    """A detached worktree of `ref` (created once, reused)."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"uniradix-ref-{sha}"
    if not path.exists():
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(path), sha],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    return path


def run_side(tree: Path, page: int, requests: int, seed: int) -> dict[str, float | None]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, str(DRIVER), str(page), str(requests), str(seed)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        cwd=tree,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    if Path(result.pop("uniradix")).resolve().parent.parent != tree.resolve():
        raise RuntimeError(f"the driver imported uniradix from outside {tree}")
    medians: dict[str, float | None] = result
    return medians


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ref", help="the git ref to compare against, e.g. e7fa5f5^")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--page-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    ref_tree = worktree_of(args.ref)
    print(f"this checkout vs {args.ref} ({ref_tree}), {args.rounds} alternating rounds")
    print("| page | " + " | ".join(OPS) + " |")
    print("|---|" + "---|" * len(OPS))
    for page in args.page_sizes:
        ratios: dict[str, list[float]] = {op: [] for op in OPS}
        for _ in range(args.rounds):
            ref = run_side(ref_tree, page, args.requests, args.seed)
            head = run_side(ROOT, page, args.requests, args.seed)
            for op in OPS:
                if ref[op] and head[op]:
                    ratios[op].append(head[op] / ref[op])  # type: ignore[operator]
        cells = [
            f"{statistics.median(r):.3f} ({min(r):.2f}-{max(r):.2f})" if r else "-"
            for r in (ratios[op] for op in OPS)
        ]
        print(f"| {page} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
