"""Per-op cost of this checkout against another git ref of uniradix, same stream, same machine.

What it answers: "does a cache built without feature X cost what it did before X landed?"
(e.g. `e7fa5f5^`, the commit before the host tier). The ref is checked out into a detached
worktree under the system temp directory; both trees run the same driver
(`against_ref_driver.py`, which uses only the public API both have: `build_cache`,
`match_prefix`, `inc_lock_ref`, `insert`, `dec_lock_ref`, `evict`).

Method, to keep the machine's drift out of the ratio: per round, one driver process per tree
(both pinned to the same CPU with `--cpu`), driven in lock step: both replay the first
`--warmup` requests untimed-for-the-report (imports, first allocations, caches warming), then
the rest in chunks of `--chunk` requests, ref then this checkout on even chunks, the other way
round on odd ones, so both see the same load within a fraction of a second. Both replay the
identical stream, so each op of request i in one tree is paired with the same op of request i
in the other: a round's figure per op is the median over requests of (this checkout's ns /
the ref's ns). The table gives the median over rounds and the range over rounds.

Stream: multi-turn chats of full attention (a shared system prompt, turns growing the
history by 60-400 tokens), `--requests` requests, a pool a quarter of the stream's distinct
tokens, so eviction runs.

`--config full+swa` / `full+mamba` serves the same stream with an SWA window or Mamba states
(see `against_ref_driver.py`).

Run: `python -m benchmarks.against_ref e7fa5f5^|DIR [--rounds 5] [--page-sizes 1 16] [--cpu 1]
[--config full+mamba]`
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
from typing import Any

OPS = ("match", "lock", "insert", "unlock", "evict")
ROOT = Path(__file__).resolve().parent.parent

DRIVER = Path(__file__).with_name("against_ref_driver.py")


def worktree_of(ref: str) -> Path:
    """A detached worktree of `ref` (created once, reused); a `ref` naming a directory is a
    source tree already (`git archive REF | tar -x -C DIR`: no worktree in the repository's
    metadata), used as it is but for its native module."""
    if Path(ref).is_dir():
        return _with_native(Path(ref).resolve())
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
    return _with_native(path)


def _with_native(path: Path) -> Path:
    if (path / "setup.py").exists() and not list((path / "uniradix").glob("_native*.so")):
        # Without its native module the ref would run the pure-Python fallbacks, and every
        # ratio against it would flatter this checkout.
        subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
            cwd=path,
            check=True,
            capture_output=True,
        )
    return path


class Driver:
    """One driver process replaying the stream through the uniradix of `tree`."""

    def __init__(
        self, tree: Path, page: int, args: argparse.Namespace, cpu: int | None = None
    ) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        argv = [str(page), str(args.requests), str(args.seed), args.config, args.workload]
        self.proc = subprocess.Popen(
            [*pin, sys.executable, str(DRIVER), *argv],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=tree,
        )
        hello = self._read()
        self.num_requests: int = hello["requests"]
        imported = Path(hello["uniradix"]).resolve().parent.parent
        if imported != tree.resolve():
            raise RuntimeError(f"the driver imported uniradix from {imported}, not {tree}")

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"driver exited with {self.proc.wait()}")
        result: dict[str, Any] = json.loads(line)
        return result

    def run(self, num_requests: int) -> dict[str, list[list[int]]]:
        """Times the stream's next `num_requests` requests: per op, [request index, ns]."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{num_requests}\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def one_round(
    trees: tuple[Path, Path], page: int, args: argparse.Namespace
) -> dict[str, float | None]:
    """Per op: the median over requests of (this checkout's ns / the ref's ns)."""
    ref, head = (Driver(t, page, args, args.cpu) for t in trees)
    try:
        ref.run(args.warmup)
        head.run(args.warmup)
        times: tuple[dict[str, dict[int, int]], ...] = (
            {op: {} for op in OPS},
            {op: {} for op in OPS},
        )
        num = min(args.requests, head.num_requests)
        for chunk in range((num - args.warmup + args.chunk - 1) // args.chunk):
            order = ((0, ref), (1, head)) if chunk % 2 == 0 else ((1, head), (0, ref))
            for side, driver in order:
                for op, pairs in driver.run(args.chunk).items():
                    times[side][op].update((i, ns) for i, ns in pairs)
    finally:
        ref.close()
        head.close()
    ratios: dict[str, float | None] = {}
    for op in OPS:
        paired = [ns / times[0][op][i] for i, ns in times[1][op].items() if times[0][op].get(i)]
        ratios[op] = statistics.median(paired) if paired else None
    return ratios


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "ref", help="the git ref to compare against, e.g. e7fa5f5^, or a source tree's directory"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300, help="requests left out of the figures")
    parser.add_argument("--chunk", type=int, default=50, help="requests per lock-step chunk")
    parser.add_argument("--page-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--workload",
        default="",
        help="a side-by-side stream (chat, fewshot, random, longchat, longdoc) instead of the "
        "driver's own multi-turn chats; --warmup counts its requests too",
    )
    parser.add_argument(
        "--config", default="full", choices=["full", "full+swa", "full+mamba"], help="cache kind"
    )
    parser.add_argument("--cpu", type=int, default=None, help="pin both drivers to this CPU")
    args = parser.parse_args(argv)
    if not 0 <= args.warmup < args.requests or args.chunk < 1:
        raise ValueError(f"need 0 <= warmup < requests and chunk >= 1, got {args}")
    trees = (worktree_of(args.ref), ROOT)
    print(
        f"{args.config} {args.workload or 'chat turns'}: this checkout vs {args.ref} "
        f"({trees[0]}): {args.rounds} rounds of {args.requests} requests ({args.warmup} "
        f"warm-up), lock-step chunks of {args.chunk}, "
        f"median of paired per-request ratios"
    )
    print("| page | " + " | ".join(OPS) + " |")
    print("|---|" + "---|" * len(OPS))
    for page in args.page_sizes:
        ratios: dict[str, list[float]] = {op: [] for op in OPS}
        for _ in range(args.rounds):
            for op, ratio in one_round(trees, page, args).items():
                if ratio is not None:
                    ratios[op].append(ratio)
        cells = [
            f"{statistics.median(r):.3f} ({min(r):.2f}-{max(r):.2f})" if r else "-"
            for r in (ratios[op] for op in OPS)
        ]
        print(f"| {page} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
