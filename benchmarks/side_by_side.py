"""uniradix vs SGLang 0.5.23 UnifiedRadixCache (Python and Rust tree cores), one command:

    python3 -m benchmarks.side_by_side            # everything, ~10 min on 2 cores
    python3 -m benchmarks.side_by_side --quick    # scale 0.2, no trace, small scale bench

It creates `.peer-venv` with SGLang when missing (`benchmarks/peer/setup_sglang.sh`), runs the
SGLang side once per tree core as a subprocess there (`benchmarks/peer/sglang_driver.py`),
runs the uniradix side in this process, and writes `benchmarks/results/side_by_side.json`
and `.md`. The sides play each stream in lock step (one SGLang process per core stays up
and plays `--chunk` batches when its turn comes, the order flipping every chunk), so a
change in the machine's load lands on both sides of a ratio; `--no-interleave` runs every
uniradix job, then every SGLang job.

Parts: `streams` (chat, fewshot, random, longchat in batches of 16: 65,536-token pool, so
eviction runs; longdoc: 8-32k-token prompts, 262,144-token pool; page 1 and 16), `mooncake`
(the synthetic trace, page 16, pools of 1M and 4M tokens), `scale` (`benchmarks/scale.py`)
and `integration`: SGLang's own cache on the uniradix TreeCore against its Rust and Python
cores (`benchmarks/sglang_cores.py`, run in this venv, where SGLang is imported next to
uniradix; its table is `sglang_cores.md` next to `--out`).
A configuration uniradix has no adapter for yet (`benchmarks/uniradix_side.ADAPTERS`) is
reported for SGLang only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.ops import Measurement, measure
from benchmarks.report import render
from benchmarks.scale import run_scale
from benchmarks.streams import StreamSpec, requests
from benchmarks.trace import TRACE
from benchmarks.uniradix_side import ADAPTERS

REPO = Path(__file__).resolve().parents[1]
PEER_PYTHON = REPO / ".peer-venv" / "bin" / "python"

CONFIGS = ("full", "full+swa", "full+mamba")
CORES = ("python", "rust")
# (workload, pool tokens, requests per batch): long documents get a pool that holds ~12 of them
STREAMS = (
    ("chat", 65536, 1),
    ("fewshot", 65536, 1),
    ("random", 65536, 1),
    ("longchat", 65536, 16),
    ("longdoc", 1 << 18, 1),
)


def jobs(args: argparse.Namespace) -> list[dict[str, Any]]:
    scale = 0.2 if args.quick else 1.0
    out: list[dict[str, Any]] = []
    for config in args.configs:
        if "streams" in args.parts:
            for workload, pool, batch in STREAMS:
                if args.workloads and workload not in args.workloads:
                    continue
                for page in (1, 16):
                    spec = StreamSpec(workload, seed=args.seed, scale=scale, batch=batch)
                    out.append(_job("streams", config, page, pool, spec.to_dict()))
        if "mooncake" in args.parts and not args.quick:
            for pool in (1 << 20, 1 << 22):
                stream = StreamSpec("mooncake", trace_path=str(args.trace)).to_dict()
                out.append(_job("mooncake", config, 16, pool, stream, heap=False))
        if "scale" in args.parts and config == "full":
            job = _job("scale", config, 1, 0, None, kind="scale")
            if args.quick:
                job.update(sizes=[10_000, 100_000], queries=30)
            out.append(job)
    return out


def _job(
    part: str,
    config: str,
    page: int,
    pool: int,
    stream: dict[str, Any] | None,
    kind: str = "stream",
    heap: bool = True,
) -> dict[str, Any]:
    return {
        "part": part,
        "kind": kind,
        "config": config,
        "page_size": page,
        "pool_tokens": pool,
        "stream": stream,
        "heap": heap,
    }


def run_uniradix(job: dict[str, Any]) -> dict[str, Any] | None:
    build = ADAPTERS.get(job["config"])
    if build is None:
        return None
    ps = job["page_size"]
    if job["kind"] == "scale":
        return run_scale(lambda size: build(ps, size), job)
    spec = StreamSpec(**job["stream"])
    return measure(
        lambda: build(ps, job["pool_tokens"]),
        lambda: requests(spec),
        heap=job["heap"],
        batch=spec.batch,
    )


def run_sglang(core: str, job_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
    _ensure_peer()
    with tempfile.TemporaryDirectory() as tmp:
        jobs_file, out_file = Path(tmp, "jobs.json"), Path(tmp, "out.json")
        jobs_file.write_text(json.dumps(job_list))
        env = {**os.environ, "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND": core}
        driver = REPO / "benchmarks/peer/sglang_driver.py"
        subprocess.run(
            [str(PEER_PYTHON), "-W", "ignore", str(driver), str(jobs_file), str(out_file)],
            check=True,
            env=env,
            cwd=REPO,
        )
        results: list[dict[str, Any]] = json.loads(out_file.read_text())
    return results


class PeerProcess:
    """A `.peer-venv` SGLang driver for one tree core, serving commands one at a time (see
    `sglang_driver.serve`)."""

    def __init__(self, core: str) -> None:
        _ensure_peer()
        env = {**os.environ, "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND": core}
        driver = REPO / "benchmarks/peer/sglang_driver.py"
        self.proc = subprocess.Popen(
            [str(PEER_PYTHON), "-W", "ignore", str(driver), "--serve"],
            env=env,
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("RESULT "):
                answer: dict[str, Any] = json.loads(line[len("RESULT ") :])
                return answer
        raise RuntimeError(f"the SGLang driver exited with {self.proc.wait()}")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def _ensure_peer() -> None:
    if not PEER_PYTHON.exists():
        subprocess.run(["bash", str(REPO / "benchmarks/peer/setup_sglang.sh")], check=True)


def run_interleaved(results: list[dict[str, Any]], cores: list[str], chunk: int) -> None:
    """Fills every entry's sides. A stream job is played by every side in lock step, `chunk`
    batches at a time, the sides taking turns (the order flips every chunk), so a change in
    the machine's load lands on all of them alike; a scale job runs whole, side after side."""
    peers = {f"sglang_{core}": PeerProcess(core) for core in cores}
    try:
        for entry in results:
            job = entry["job"]
            t0 = time.perf_counter()
            if job["kind"] == "scale" or ADAPTERS.get(job["config"]) is None:
                for name, peer in peers.items():
                    entry["sides"][name] = peer.ask({"job": job})
                side = run_uniradix(job)
                if side is not None:
                    entry["sides"]["uniradix"] = side
            else:
                entry["sides"].update(_lock_step(job, peers, chunk))
            print(f"{_label(job)}: {time.perf_counter() - t0:.1f}s", flush=True)
    finally:
        for peer in peers.values():
            peer.close()


def _lock_step(
    job: dict[str, Any], peers: dict[str, PeerProcess], chunk: int
) -> dict[str, dict[str, Any]]:
    spec, ps, pool = StreamSpec(**job["stream"]), job["page_size"], job["pool_tokens"]
    build = ADAPTERS[job["config"]]
    own = Measurement(
        lambda: build(ps, pool), lambda: requests(spec), heap=job["heap"], batch=spec.batch
    )
    for peer in peers.values():
        peer.ask({"start": job})
    turns: list[tuple[str, Any]] = [("uniradix", own), *peers.items()]
    done: set[str] = set()
    flip = False
    while len(done) < len(turns):
        for name, side in reversed(turns) if flip else turns:
            if name in done:
                continue
            finished = side.step(chunk) if name == "uniradix" else side.ask({"step": chunk})["done"]
            if finished:
                done.add(name)
        flip = not flip
    out = {name: peer.ask({"finish": True}) for name, peer in peers.items()}
    out["uniradix"] = own.finish()
    return out


def run_sequential(
    results: list[dict[str, Any]], job_list: list[dict[str, Any]], args: argparse.Namespace
) -> None:
    """Every uniradix job, then every job of each SGLang core (`--no-interleave`)."""
    for entry in results:
        t0 = time.perf_counter()
        side = run_uniradix(entry["job"])
        if side is not None:
            entry["sides"]["uniradix"] = side
            print(f"uniradix {_label(entry['job'])}: {time.perf_counter() - t0:.1f}s")
    if not args.no_sglang:
        for core in args.cores.split(","):
            for entry, side in zip(results, run_sglang(core, job_list), strict=True):
                entry["sides"][f"sglang_{core}"] = side


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--parts", default="streams,mooncake,scale,integration")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--cores", default=",".join(CORES))
    parser.add_argument("--workloads", default="", help="streams to play (default: all)")
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--no-sglang", action="store_true", help="uniradix side only")
    parser.add_argument(
        "--no-interleave", action="store_true", help="all uniradix jobs, then all SGLang jobs"
    )
    parser.add_argument("--chunk", type=int, default=20, help="batches per lock-step turn")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/side_by_side")
    args = parser.parse_args(argv)
    args.parts = args.parts.split(",")
    args.configs = args.configs.split(",")
    args.workloads = [w for w in args.workloads.split(",") if w]
    if "integration" in args.parts and not args.no_sglang:
        run_integration(args)
    job_list = jobs(args)
    if not job_list:
        return
    results: list[dict[str, Any]] = [{"job": job, "sides": {}} for job in job_list]
    if not args.no_sglang and not args.no_interleave:
        run_interleaved(results, args.cores.split(","), args.chunk)
    else:
        run_sequential(results, job_list, args)
    doc = {
        "machine": {"platform": platform.platform(), "python": sys.version.split()[0]},
        "command": "python3 -m benchmarks.side_by_side " + " ".join(argv or sys.argv[1:]),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    table = render(doc)
    args.out.with_suffix(".md").write_text(table)
    print(table)


def run_integration(args: argparse.Namespace) -> None:
    """`benchmarks/sglang_cores.py` on the chosen configs (chat and fewshot unless
    `--workloads` names others); skipped, saying so, where SGLang is not in this venv."""
    if importlib.util.find_spec("sglang") is None:
        print("integration: skipped, SGLang is not installed here (scripts/setup_sglang.sh)")
        return
    workloads = ",".join(args.workloads) or "chat,fewshot"
    command = [sys.executable, str(REPO / "benchmarks" / "sglang_cores.py")]
    command += ["--workloads", workloads, "--configs", ",".join(args.configs)]
    command += ["--scale", "0.3" if args.quick else "1.0"]
    command += ["--out", os.path.relpath(args.out.with_name("sglang_cores.md"))]
    subprocess.run(command, check=True)


def _label(job: dict[str, Any]) -> str:
    stream = job["stream"] or {}
    return f"{job['part']} {job['config']} {stream.get('workload', '')} page {job['page_size']}"


if __name__ == "__main__":
    main()
