"""Hybrid-aware KV events and routing (issue 31): on a Mooncake-format trace, 4 instances
behind the cache-aware router, page 16, per hybrid config (full+SWA, full+Mamba,
full+SWA+Mamba):

- hit tokens the index predicted when each request was admitted (`at_match`, from the
  events with SWA / Mamba groups) against the actual hits, what a full-only stream
  promised at the same moment (its over-prediction), and what the router itself predicted
  at routing, with its excess split into unprefilled and unresumable tokens
  (`uniradix.sim.predictions`), in all and per instance;
- the cluster's hit rate per run kind: `auto` (the default: the cache-aware router on group
  events, dispatching late and awaiting turns), `full` (on full-only events), the router
  options in `VARIANTS`, the cluster dispatches in `DISPATCHES` (`early`: session 15's
  default, routing on arrival; late binding or awaited turns alone), `pinned` (each
  conversation on one instance: a study, synthetic trace only), against `one` instance
  holding all four instances' memory (and `one-await`, the same awaiting turns, for the
  kinds that await them).

    .venv/bin/python -m benchmarks.hybrid_routing --requests 300     # a synthetic trace
    .venv/bin/python -m benchmarks.hybrid_routing --requests 1000 --kinds auto,one --jobs 3
    .venv/bin/python -m benchmarks.hybrid_routing --trace T.jsonl --requests 800

Without `--trace` it writes a synthetic Mooncake trace (conversations on shared system
prompts, each turn resending the context plus new blocks, seeded) to a temporary file.
Replays run in a process pool (`--jobs`). Results: `benchmarks/results/hybrid_routing.json`
(one entry per trace and request count; a run with `--kinds` replaces only those kinds)
and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from uniradix.events import KVEventsConfig
from uniradix.sim.cluster import Cluster
from uniradix.sim.predictions import FIELDS as PREDICTION_FIELDS
from uniradix.sim.replay import ReplayOptions
from uniradix.sim.router import LeastLoaded, RouterFactory, make_router

RESULTS = Path(__file__).parent / "results" / "hybrid_routing.json"
CONFIGS = ("swa", "mamba", "hybrid")
INSTANCES = 4


def synthetic_trace(path: Path, requests: int, seed: int = 0) -> list[int]:
    """Mooncake rows: conversations on 8 system prompts (2-6 blocks of 512 tokens), each
    turn the previous context plus 1-3 new blocks; conversations interleave. Returns each
    row's conversation number (not in the trace: only the pinning study reads it)."""
    rng = random.Random(seed)
    next_id = 0

    def blocks(n: int) -> list[int]:
        nonlocal next_id
        next_id += n
        return list(range(next_id - n, next_id))

    systems = [blocks(rng.randint(2, 6)) for _ in range(8)]
    live: list[tuple[int, list[int]]] = []  # (conversation number, its context)
    rows, conversations, started = [], [], 0
    for t in range(requests):
        if not live or (len(live) < 24 and rng.random() < 0.3):
            live.append((started, list(rng.choice(systems))))
            started += 1
        number, conv = rng.choice(live)
        conversations.append(number)
        conv += blocks(rng.randint(1, 3))
        if len(conv) > 24:
            live.remove((number, conv))
        rows.append({"timestamp": t, "input_length": 512 * len(conv) - rng.randint(0, 400),
                     "output_length": rng.randint(16, 128), "hash_ids": list(conv)})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return conversations


class PinnedByConversation:
    """Not a router (it reads the trace's conversations): each conversation stays on the
    instance its first turn went to, the least loaded then. What placement alone reaches
    when no turn ever moves, the ceiling the routers are held against."""

    def __init__(self, conversations: list[int]) -> None:
        self.conversations = conversations
        self.owner: dict[int, int] = {}
        self.routed = 0
        self._fallback = LeastLoaded()

    def choose(self, tokens: np.ndarray, loads: Sequence[int]) -> int:
        # The cluster routes rows in trace order (no row waits on another here).
        conv = self.conversations[self.routed]
        self.routed += 1
        if conv not in self.owner:
            self.owner[conv] = self._fallback.choose(tokens, loads)
        return self.owner[conv]


# Cache-aware router options measured next to the default (`CacheAware`'s).
VARIANTS: dict[str, dict[str, Any]] = {
    "discount": {"replicated": "discount"},
    "continuation": {"replicated": "discount", "continuation_slack": 40},
}
# Dispatch (`Cluster`'s `dispatch`, `await_turns`) measured next to the default (`auto`:
# late binding with awaited turns for the cache-aware router); `early` was the default.
DISPATCHES: dict[str, dict[str, Any]] = {
    "early": {"dispatch": "early", "await_turns": False},
    "late": {"dispatch": "late", "await_turns": False},
    "await": {"dispatch": "early", "await_turns": True},
    "late-await": {"dispatch": "late", "await_turns": True},
}
ONE_AWAIT = "hit_rate_one_instance_awaiting"  # "one-await": next turns after the previous
KINDS = ("auto", "full", *VARIANTS, *DISPATCHES, "pinned", "one", "one-await")
PER_INSTANCE = ("name", "requests", "hit_tokens", *PREDICTION_FIELDS)


def run(
    options: ReplayOptions,
    instances: int,
    components: str,
    router: str | RouterFactory = "cache-aware",
    **dispatch: Any,
) -> dict[str, Any]:
    events = KVEventsConfig(publisher="null", components=components)
    return Cluster(options, instances, router, events, **dispatch).run()


def one_instance(options: ReplayOptions, await_turns: bool = False) -> dict[str, Any]:
    """One instance with every pool and the running limit of all four; `await_turns`: a
    next turn is handed on once its previous turn is prefilled, as with the `await` kinds."""
    big = options.updated(
        full_tokens=options.pools.full_tokens * INSTANCES,
        swa_tokens=(options.pools.swa_tokens or options.pools.full_tokens) * INSTANCES,
        mamba_slots=(options.pools.mamba_slots or 0) * INSTANCES or None,
        max_running=options.scheduler.max_running * INSTANCES,
    )
    return run(big, 1, "auto", await_turns=await_turns)


def _pinned(conversations: list[int]) -> RouterFactory:
    return lambda index, names, recent: PinnedByConversation(conversations)


def _variant(options: dict[str, Any]) -> RouterFactory:
    return lambda index, names, recent: make_router("cache-aware", index, names, recent, **options)


def _replay(task: tuple[ReplayOptions, str, list[int] | None]) -> dict[str, Any]:
    """One replay of the comparison, by kind (a process pool's unit of work)."""
    options, kind, conversations = task
    t0 = time.perf_counter()
    if kind in ("one", "one-await"):
        summary = one_instance(options, await_turns=kind == "one-await")
    elif kind == "pinned":
        assert conversations is not None
        summary = run(options, INSTANCES, "auto", _pinned(conversations))
    elif kind in DISPATCHES:
        summary = run(options, INSTANCES, "auto", **DISPATCHES[kind])
    elif kind in VARIANTS:
        summary = run(options, INSTANCES, "auto", _variant(VARIANTS[kind]))
    else:
        summary = run(options, INSTANCES, kind)
    summary["wall_s"] = time.perf_counter() - t0
    return summary


def _ratios(summary: dict[str, Any]) -> dict[str, Any]:
    actual = max(summary["hit_tokens"], 1)
    return {
        "hit_rate": summary["hit_rate"],
        "actual_hit_tokens": summary["hit_tokens"],
        "at_match_over_actual": summary["at_match_hit_tokens"] / actual,
        "predicted_over_actual": summary["predicted_hit_tokens"] / actual,
        "full_only_over_actual": summary["full_only_hit_tokens"] / actual,
        "unprefilled_over_actual": summary["predicted_unprefilled_tokens"] / actual,
        "unresumable_over_actual": summary["predicted_unresumable_tokens"] / actual,
        "predicted_over_actual_per_instance": [
            inst["predicted_hit_tokens"] / max(inst["hit_tokens"], 1)
            for inst in summary["instances"]
        ],
        "per_instance": [{k: inst[k] for k in PER_INSTANCE} for inst in summary["instances"]],
        "wall_s": summary["wall_s"],
    }


def measure(
    trace: str,
    requests: int,
    conversations: list[int] | None,
    jobs: int,
    kinds: Sequence[str] = KINDS,
    previous: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Per config: the default router on group events ("auto") and on full-only ones
    ("full"), each variant, the pinning study (synthetic trace only), and one instance.
    `kinds` picks some; the others are kept from `previous` (the same trace's entry)."""
    base = ReplayOptions.of(
        trace=trace,
        page_size=16,
        full_tokens=64_000,
        swa_tokens=8_000,
        sliding_window=1024,
        mamba_slots=24,
        max_running=16,
        max_requests=requests,
    )
    kinds = [k for k in kinds if k != "pinned" or conversations]
    tasks = [(replace(base, config=c), k, conversations) for c in CONFIGS for k in kinds]
    with ProcessPoolExecutor(jobs) as pool:
        summaries = list(pool.map(_replay, tasks))
    done = {(t[0].config, t[1]): summary for t, summary in zip(tasks, summaries, strict=True)}
    out: dict[str, Any] = {}
    for config in CONFIGS:
        before = (previous or {}).get(config, {})
        baselines = {}
        for kind, key in (("one", "hit_rate_one_instance"), ("one-await", ONE_AWAIT)):
            if (config, kind) in done:
                baselines[key] = done[(config, kind)]["hit_rate"]
            elif key in before:
                baselines[key] = before[key]
            elif kind == "one":
                raise ValueError(f"no one-instance run for {config}: add 'one' to the kinds")
        one = baselines["hit_rate_one_instance"]
        fresh = {k: _ratios(done[(config, k)]) for k in kinds if not k.startswith("one")}
        runs = before.get("runs", {}) | fresh
        out[config] = {
            "requests": next(s["requests"] for (c, _), s in done.items() if c == config),
            **baselines,
            "vs_one_instance": {k: r["hit_rate"] / max(one, 1e-9) for k, r in runs.items()},
            "runs": runs,
        }
        if ONE_AWAIT in baselines:  # the kinds that hold next turns, against one that does
            out[config]["vs_one_instance_awaiting"] = {
                k: runs[k]["hit_rate"] / max(baselines[ONE_AWAIT], 1e-9)
                for k in runs
                if DISPATCHES.get(k, {}).get("await_turns")
            }
    return out


def table(results: dict[str, Any]) -> str:
    """Two tables: the index's figures against the actual hits per config and run kind,
    then the hit rates against one instance (and against one that awaits turns)."""
    kinds = list(next(iter(results.values()))["runs"])
    lines = [
        "| config, run | at admission / actual | full-only / actual | predicted / actual "
        "(unprefilled + unresumable) | per instance |",
        "|---|---|---|---|---|",
    ]
    for config, r in results.items():
        for kind, x in r["runs"].items():
            per = x["predicted_over_actual_per_instance"]
            lines.append(
                f"| {config}, {kind} | {x['at_match_over_actual']:.3f} | "
                f"{x['full_only_over_actual']:.3f} | {x['predicted_over_actual']:.3f} "
                f"({x['unprefilled_over_actual']:.3f} + {x['unresumable_over_actual']:.3f}) | "
                f"{min(per):.2f}-{max(per):.2f} |"
            )
    lines += [
        "",
        "| config | one instance | one, awaiting turns | "
        + " | ".join(f"{k}: hit rate, vs one" for k in kinds)
        + " |",
        "|---|---|---|" + "---|" * len(kinds),
    ]
    for config, r in results.items():
        awaiting = r.get("vs_one_instance_awaiting", {})
        cells = [
            f"{r['runs'][k]['hit_rate']:.3f}, {r['vs_one_instance'][k]:.2f}"
            + (f" ({awaiting[k]:.2f})" if k in awaiting else "")
            for k in kinds
        ]
        one_await = r.get(ONE_AWAIT)
        lines.append(
            f"| {config} | {r['hit_rate_one_instance']:.3f} | "
            f"{'-' if one_await is None else f'{one_await:.3f}'} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", help="a Mooncake JSONL trace (default: synthetic)")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--jobs", type=int, default=2, help="replays run at once")
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"comma-separated runs among {', '.join(KINDS)} (the others are kept)",
    )
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    if bad := [k for k in kinds if k not in KINDS]:
        parser.error(f"unknown kind {bad[0]!r}; choose from {', '.join(KINDS)}")
    source = args.trace or "synthetic Mooncake trace (seed 0)"
    key = f"{Path(source).name}, {args.requests} requests"
    # One entry per trace and request count: a run replaces only its own kinds.
    out = Path(args.out)
    runs = json.loads(out.read_text()).get("runs", {}) if out.exists() else {}
    previous = runs.get(key) if "runs" in next(iter(runs.get(key, {}).values()), {}) else None
    with tempfile.TemporaryDirectory() as tmp:
        trace, conversations = args.trace, None
        if trace is None:
            trace = str(Path(tmp) / "synthetic.jsonl")
            conversations = synthetic_trace(Path(trace), args.requests)
        results = measure(trace, args.requests, conversations, args.jobs, kinds, previous)
    # Read again: another run may have written its own entry meanwhile.
    runs = json.loads(out.read_text()).get("runs", {}) if out.exists() else {}
    runs[key] = results
    out.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
