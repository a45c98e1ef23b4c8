"""The L3 fault table: what a store that is down, locked, read-only, full or killed costs a
replay, what the user is told, and the hits once the fault is gone.

Each case runs `uniradix replay` (the default workload, a host tier, the first N requests)
as a user would, in its own process: the wall time of the process with the fault against
the same replay without L3 (target: at most 1.3x), the first line L3 printed on stderr, how
long L3 was off, and the hit rate of a replay after the fault was removed (the store
refilled by one run, then measured by the next) against a healthy store measured alike.

Faults: nothing listening at the Redis URL; a wrong password; a read-only store directory
(a read-only bind mount when run as root, whom permissions do not stop; else chmod); a full
Redis (`maxmemory` with `noeviction`); Redis killed once the run wrote pages and restarted
(empty) a third of the run's wall later. Run from the repository root:
`python -m benchmarks.l3_faults [--requests 100] [--out benchmarks/results/l3_faults.md]`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.redis_servers import RedisProcess, free_port


@dataclass
class Run:
    wall_s: float
    summary: dict[str, Any]
    stderr: list[str]

    @property
    def hit_rate(self) -> float:
        return float(self.summary["hit_rate"])

    @property
    def off_s(self) -> float:
        store = self.summary.get("storage")
        return 0.0 if store is None else float(store["off_s"])


def replay(
    base: list[str], storage: str | None, during: Callable[[float], None] | None = None
) -> Run:
    argv = [sys.executable, "-m", "uniradix.cli", *base]
    if storage is not None:
        argv += ["--storage", storage]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if during is not None:
        during(t0)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"replay failed ({proc.returncode}): {err.decode()[-2000:]}")
    lines = [line for line in err.decode().splitlines() if line.startswith("uniradix: L3")]
    return Run(wall, json.loads(out), lines)


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """`directory` read-only for this process's children, root included."""
    if os.geteuid() == 0:
        subprocess.run(["mount", "--bind", str(directory), str(directory)], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,ro,bind", str(directory)], check=True)
            yield
        finally:
            subprocess.run(["umount", str(directory)], check=True)
        return
    dirs = [directory, *(p for p in directory.rglob("*") if p.is_dir())]
    for d in dirs:
        d.chmod(0o555)
    try:
        yield
    finally:
        for d in dirs:
            d.chmod(0o755)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--host-tokens", type=int, default=200_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    base = ["replay", "--host-tokens", str(args.host_tokens), "--max-requests", str(args.requests)]
    base += ["--no-progress", "--json"]
    work = Path(tempfile.mkdtemp(prefix="uniradix-l3-faults-"))
    rows: list[tuple[str, Run, float]] = []

    def twice(url: str) -> float:
        replay(base, url)
        return replay(base, url).hit_rate

    no_l3 = replay(base, None)
    healthy = RedisProcess(work / "healthy").start()
    healthy_hits = twice(healthy.url())
    healthy.stop()

    # Nothing listening; then a server on that port.
    port = free_port()
    fault = replay(base, f"redis://127.0.0.1:{port}/0")
    server = RedisProcess(work / "unreachable")
    server.port = port
    server.start()
    rows.append(("nothing listening at the URL", fault, twice(server.url())))
    server.stop()

    # A wrong password; then the right one.
    server = RedisProcess(work / "auth", password="right").start()
    fault = replay(base, server.url("wrong"))
    rows.append(("wrong password", fault, twice(server.url("right"))))
    server.stop()

    # A read-only directory (made by a one-request run: its pages are all a replay could
    # read); then writable again.
    store = work / "readonly"
    replay([*base, "--max-requests", "1"], f"file://{store}")
    with read_only(store):
        fault = replay(base, f"file://{store}")
    rows.append(("read-only store directory", fault, twice(f"file://{store}")))

    # A full Redis under noeviction; then room again.
    server = RedisProcess(work / "full", "--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
    server.start()
    fault = replay(base, server.url())
    server.client().config_set("maxmemory", "0")
    rows.append(("full Redis (noeviction)", fault, twice(server.url())))
    server.stop()

    # Killed once the run has written pages (its start-up, imports included, can take a
    # third of the wall on a loaded machine: a kill timed from the start could miss every
    # L3 call), held down a third of the run's wall, restarted empty.
    server = RedisProcess(work / "killed").start()
    span = no_l3.wall_s

    def kill_and_restart(t0: float) -> None:
        client = server.client()
        while client.dbsize() == 0 and time.perf_counter() < t0 + span:
            time.sleep(0.05)
        server.stop()
        time.sleep(span / 3)
        server.start()

    fault = replay(base, server.url(), during=kill_and_restart)
    rows.append(("Redis killed mid-run, restarted", fault, twice(server.url())))
    server.stop()

    shutil.rmtree(work, ignore_errors=True)
    report = render(args, no_l3, healthy_hits, rows)
    print(report)
    if args.out is not None:
        args.out.write_text(report)


def render(
    args: argparse.Namespace, no_l3: Run, healthy_hits: float, rows: list[tuple[str, Run, float]]
) -> str:
    lines = [
        "# L3 faults: cost, what the user sees, recovery",
        "",
        f"`uniradix replay` (default workload, first {args.requests} requests, "
        f"--host-tokens {args.host_tokens}), one process per run. Without L3: "
        f"{no_l3.wall_s:.1f} s, hit rate {no_l3.hit_rate:.4f}; on a healthy Redis (second "
        f"run): hit rate {healthy_hits:.4f}.",
        "",
        "| fault | wall | vs no L3 | L3 off | hit rate | first line on stderr | "
        "hit rate after recovery |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, run, after in rows:
        first = run.stderr[0] if run.stderr else "(none)"
        lines.append(
            f"| {name} | {run.wall_s:.1f} s | {run.wall_s / no_l3.wall_s:.2f}x | "
            f"{run.off_s:.1f} s | {run.hit_rate:.4f} | `{first}` ({len(run.stderr)} lines) | "
            f"{after:.4f} |"
        )
    lines += [
        "",
        "Command: `python -m benchmarks.l3_faults --requests "
        f"{args.requests} --host-tokens {args.host_tokens} --out benchmarks/results/l3_faults.md`",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
