"""Python-level calls per `match_prefix` and per `insert` of uniradix on the side-by-side
streams (full+Mamba by default), counted with `sys.setprofile` ("call" events: Python
functions, generator resumes included; builtins not counted). Deterministic, unlike timings,
so it compares two source trees on a loaded machine:

    PYTHONPATH=<tree> .venv/bin/python -m benchmarks.calls_per_op [--config full+mamba]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from benchmarks import ops, streams
from benchmarks.uniradix_side import ADAPTERS

COUNTED = ("match_prefix", "insert")


def count_calls(config: str, workload: str, page_size: int, scale: float) -> dict[str, float]:
    """Mean Python calls per counted cache method over one stream."""
    adapter = ADAPTERS[config](page_size, 65536)
    totals = {name: [0, 0] for name in COUNTED}  # calls, invocations

    def counting(name: str, method: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def wrapped(params: Any) -> Any:
            calls = 0

            def profile(frame: FrameType, event: str, arg: Any) -> None:
                nonlocal calls
                if event == "call":
                    calls += 1

            sys.setprofile(profile)
            try:
                return method(params)
            finally:
                sys.setprofile(None)
                totals[name][0] += calls
                totals[name][1] += 1

        return wrapped

    for name in COUNTED:
        setattr(adapter.cache, name, counting(name, getattr(adapter.cache, name)))
    batch = 16 if workload == "longchat" else 1
    spec = streams.StreamSpec(workload, scale=scale, batch=batch)
    ops.play(adapter, streams.requests(spec), batch=batch)
    return {name: calls / max(n, 1) for name, (calls, n) in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="full+mamba", choices=sorted(ADAPTERS))
    parser.add_argument("--workloads", nargs="+", default=["chat", "fewshot", "longchat"])
    parser.add_argument("--pages", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--scale", type=float, default=0.3)
    args = parser.parse_args()
    for workload in args.workloads:
        for page_size in args.pages:
            counts = count_calls(args.config, workload, page_size, args.scale)
            cells = "  ".join(f"{name} {counts[name]:5.1f}" for name in COUNTED)
            print(f"{args.config} {workload:9} page {page_size:2}: {cells}", flush=True)


if __name__ == "__main__":
    main()
