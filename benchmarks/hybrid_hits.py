"""Hybrid hit rates as a fraction of full-attention-only, with the causes of lost hits, on the
Mooncake trace and every built-in workload (issue 14's sizes), and the auxiliary pool size at
which each hybrid config reaches 0.95x full-only.

    .venv/bin/python -m benchmarks.hybrid_hits --label before [--sources trace multi_turn ...]
        [--policy lru] [--swa-policy study:greedy_dual_window] [--placement] [--pool-search]
        [--mamba-slots 512] [--max-requests 2000] [--configs swa hybrid] [--swa-floor]
        [--scales 1 1.25 1.5 2]
        [--out benchmarks/results]

Sizes: page 16; full KV = a quarter of the working set (the tokens an unbounded cache would
store: prompt tokens minus ideal hits), but at least twice the longest request so no request
is rejected; SWA pool = full / 4 (window 1024 and 4096), raised to a prefill chunk plus two
windows (at most the full pool) where that is more (small workloads), or just that with
`--swa-floor`; 512 Mamba slots.
`--pool-search` doubles the auxiliary pool (SWA tokens, Mamba slots; both for
full+SWA+Mamba) up to 4x until the config reaches 0.95x full-only; `--scales 1 1.0625 1.125
1.25 1.5 2` tries those multiples instead, in order. Writes
`hybrid_hits_<label>.json` and `.md`; `--merge A.json B.json --label L` writes one labelled
run from runs over different sources (the trace apart from the workloads).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.studies.retired_orders import MAMBA_STUDY_ORDERS, SWA_STUDY_ORDERS
from benchmarks.trace import TRACE
from uniradix.sim.ideal import ideal_hits
from uniradix.sim.replay import ReplayOptions, load_specs, run_replay
from uniradix.sim.workloads import WORKLOADS

PAGE = 16
WINDOWS = (1024, 4096)
MAMBA_SLOTS = 512
TARGET = 0.95
SCALES = (1.0, 2.0, 4.0)  # the pool search's multiples of the auxiliary pools
CONFIGS = [("swa", w) for w in WINDOWS] + [("mamba", None)] + [("hybrid", w) for w in WINDOWS]


def base_options(source: str, trace: str) -> ReplayOptions:
    if source == "trace":
        return ReplayOptions.of(trace=trace, page_size=PAGE, max_running=64, chunk_size=8192)
    return ReplayOptions.of(workload=source, page_size=PAGE)


def full_pool(options: ReplayOptions) -> tuple[int, int]:
    """(full KV tokens, working set tokens) for `options`' requests."""
    specs = load_specs(options)
    working = sum(len(s.prompt) for s in specs) - sum(ideal_hits(specs, PAGE))
    longest = max(len(s.prompt) + s.output_len for s in specs)
    tokens = max(working // 4, 2 * longest)
    return -(-tokens // PAGE) * PAGE, working


def run(options: ReplayOptions) -> dict[str, Any]:
    s = run_replay(options).summary
    if any(s["leaked"].values()):
        raise RuntimeError(f"leak in {options}: {s['leaked']}")
    return s


def sized(
    base: ReplayOptions,
    config: str,
    window: int | None,
    scale: float,
    slots: int = MAMBA_SLOTS,
    swa_floor: bool = False,
) -> ReplayOptions:
    """`base` at issue 14's sizes, the auxiliary pools times `scale` (rounded up to a page
    and a slot); `swa_floor`: the SWA pool at its floor, not a quarter."""
    # An SWA pool must hold a prefill chunk and two windows, else the scheduler stalls.
    floor = base.scheduler.chunk_size + 2 * (window or WINDOWS[0])
    swa = min(
        base.pools.full_tokens, floor if swa_floor else max(base.pools.full_tokens // 4, floor)
    )
    swa_scale = scale if config in ("swa", "hybrid") else 1
    slots_scale = scale if config in ("mamba", "hybrid") else 1
    return base.updated(
        config=config,
        sliding_window=window or WINDOWS[0],
        swa_tokens=math.ceil(swa * swa_scale / PAGE) * PAGE,
        mamba_slots=math.ceil(slots * slots_scale),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="run")
    parser.add_argument("--sources", nargs="+", default=[*sorted(WORKLOADS), "trace"])
    parser.add_argument("--trace", default=str(TRACE))
    study = "(None: default; lru; or a retired order's study copy: {})"
    parser.add_argument(
        "--policy", default=None, help="Mamba eviction order " + study.format(MAMBA_STUDY_ORDERS)
    )
    parser.add_argument(
        "--swa-policy", default=None, help="SWA eviction order " + study.format(SWA_STUDY_ORDERS)
    )
    parser.add_argument("--max-requests", type=int, default=None, help="the first N only")
    parser.add_argument(
        "--configs", nargs="+", default=None, help="of swa mamba hybrid (default: all)"
    )
    parser.add_argument("--placement", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--pool-search", action="store_true")
    parser.add_argument(
        "--scales",
        nargs="+",
        type=float,
        default=None,
        help="the pool search's multiples, in order (implies --pool-search; default 1 2 4)",
    )
    parser.add_argument("--mamba-slots", type=int, default=MAMBA_SLOTS, help="at scale 1")
    parser.add_argument("--no-trace-search", action="store_true", help="no pool search on it")
    parser.add_argument(
        "--swa-floor", action="store_true", help="SWA pool at a prefill chunk plus two windows"
    )
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--compare", nargs="+", help="write hybrid_hits.md from these JSONs")
    parser.add_argument("--merge", nargs="+", help="one labelled run from these runs' JSONs")
    args = parser.parse_args()
    if args.scales is not None and (args.scales[0] != 1 or args.scales != sorted(args.scales)):
        raise ValueError(f"--scales {args.scales}: must start at 1 and increase")
    if args.compare:
        compare(args.compare, Path(args.out))
        return 0
    if args.merge:
        runs = [json.loads(Path(p).read_text()) for p in args.merge]
        command = " and ".join(f"`{run['meta']['command']}`" for run in runs)
        write(args, [r for run in runs for r in run["rows"]], command.strip("`"))
        return 0
    extra: dict[str, Any] = {}
    if args.policy is not None:
        extra["aux_eviction_policy"] = args.policy
    if args.swa_policy is not None:
        extra["swa_eviction_policy"] = args.swa_policy
    if args.max_requests is not None:
        extra["max_requests"] = args.max_requests
    if args.placement is not None:
        extra["checkpoint_placement"] = args.placement
    configs = [c for c in CONFIGS if args.configs is None or c[0] in args.configs]
    searching = args.pool_search or args.scales is not None
    scales = args.scales or list(SCALES)
    rows: list[dict[str, Any]] = []
    for source in args.sources:
        base = base_options(source, args.trace).updated(**extra)
        full_tokens, working = full_pool(base)
        base = base.updated(full_tokens=full_tokens)
        t0 = time.perf_counter()
        full = run(base.updated(config="full"))
        print(f"{source} full {full['hit_rate']:.4f} ({time.perf_counter() - t0:.0f}s)", flush=True)
        for config, window in configs:
            found: float | None = None
            first: dict[str, Any] | None = None
            tried: list[tuple[float, float]] = []
            search = searching and not (source == "trace" and args.no_trace_search)
            for scale in scales if search else scales[:1]:
                s = run(sized(base, config, window, scale, args.mamba_slots, args.swa_floor))
                ratio = s["hit_rate"] / full["hit_rate"] if full["hit_rate"] else 1.0
                first = first or {**s, "ratio": ratio}
                tried.append((scale, ratio))
                if ratio >= TARGET:
                    found = scale
                    break
            assert first is not None
            opts = sized(base, config, window, found or 1, args.mamba_slots, args.swa_floor)
            row = {
                "source": source,
                "config": config,
                "window": window,
                "working_set_tokens": working,
                "full_tokens": full_tokens,
                "swa_tokens": (
                    sized(base, config, window, 1, swa_floor=args.swa_floor).pools.swa_tokens
                    if window
                    else None
                ),
                "mamba_slots": args.mamba_slots,
                "full_hit_rate": full["hit_rate"],
                "hit_rate": first["hit_rate"],
                "ratio": first["ratio"],
                "lost_hits": first["lost_hits"],
                "reaches_target_at_scale": found,
                "target_swa_tokens": opts.pools.swa_tokens if found else None,
                "target_mamba_slots": opts.pools.mamba_slots if found else None,
                "scales_tried": tried,
            }
            rows.append(row)
            print(
                f"{source} {config} W={window} {row['ratio']:.3f}x (x{found} reaches {TARGET})",
                flush=True,
            )
    write(args, rows)
    return 0


def ratio_text(r: dict[str, Any]) -> str:
    """The hit rate as a fraction of full-only; n/a where full-only hits nothing."""
    if not r["full_hit_rate"]:
        return f"n/a ({r['hit_rate']:.4f} / 0)"
    return f"{r['ratio']:.3f} ({r['hit_rate']:.4f} / {r['full_hit_rate']:.4f})"


def compare(paths: list[str], out: Path) -> None:
    """One table of several labelled runs side by side: ratio and 0.95x pool per row."""
    runs = {
        Path(p).stem.removeprefix("hybrid_hits_"): json.loads(Path(p).read_text()) for p in paths
    }
    labels = list(runs)
    lines = [
        "| source | config | W | "
        + " | ".join(f"{lb}: hit / full-only" for lb in labels)
        + " | "
        + " | ".join(f"{lb}: 0.95x at (SWA, Mamba)" for lb in labels)
        + " |",
        "|---|---|---|" + "---|" * (2 * len(labels)),
    ]
    keyed = [
        {(r["source"], r["config"], r["window"]): r for r in run["rows"]} for run in runs.values()
    ]
    for key in keyed[0]:
        rows = [k.get(key) for k in keyed]
        ratios = [ratio_text(r) if r else "-" for r in rows]
        pools = [
            f"{r['target_swa_tokens'] if r['window'] else '-'}, {r['target_mamba_slots']}"
            if r and r["reaches_target_at_scale"]
            else "-"
            for r in rows
        ]
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2] or '-'} | " + " | ".join(ratios + pools) + " |"
        )
    commands = [f"- {lb}: `{run['meta']['command']}`" for lb, run in runs.items()]
    (out / "hybrid_hits.md").write_text("\n".join([*commands, "", *lines]) + "\n")
    print("\n".join(lines))


def full_kv_share(r: dict[str, Any]) -> str:
    """The hybrid's own full-KV match as a fraction of full-only's hits: below 1 when the
    auxiliary pools' pressure evicted whole leaves (full KV with them)."""
    lost = r["lost_hits"]
    if not (lost["usable_hit_tokens"] and r["full_hit_rate"]):
        return "-"
    prompt = lost["usable_hit_tokens"] / r["hit_rate"]
    return f"{lost['full_kv_hit_tokens'] / prompt / r['full_hit_rate']:.3f}"


def pool_text(r: dict[str, Any]) -> str:
    """The auxiliary pools reaching 0.95x full-only, and each multiple the search tried with
    its ratio; `-` where there was no search."""
    tried = r.get("scales_tried", [])
    if len(tried) < 2 and not r["reaches_target_at_scale"]:
        return "-"
    steps = ", ".join(f"x{scale:g}: {ratio:.3f}" for scale, ratio in tried)
    if not r["reaches_target_at_scale"]:
        return f"not reached ({steps})"
    swa = r["target_swa_tokens"] if r["window"] else "-"
    return f"{swa}, {r['target_mamba_slots']} ({steps})"


def write(args: argparse.Namespace, rows: list[dict[str, Any]], command: str = "") -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = command or "python -m benchmarks.hybrid_hits " + " ".join(sys.argv[1:])
    meta = {"command": command, "machine": platform.platform(), "python": platform.python_version()}
    (out / f"hybrid_hits_{args.label}.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n"
    )
    lines = [
        f"Command: `{command}`  ",
        f"Machine: {meta['machine']}, Python {meta['python']}",
        "",
        "| source | config | W | full KV | SWA pool | hit / full-only | full-KV match / "
        "full-only | lost | swa_tomb | swa_evict | mamba_missing | mamba_evict | 0.95x at "
        "(SWA tokens, Mamba slots) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lost = r["lost_hits"]
        full = max(lost["full_kv_hit_tokens"], 1)
        c = {k: f"{v / full:.1%}" for k, v in lost["causes"].items()}
        at = pool_text(r)
        lines.append(
            f"| {r['source']} | {r['config']} | {r['window'] or '-'} | {r['full_tokens']} | "
            f"{r['swa_tokens'] or '-'} | {ratio_text(r)} | {full_kv_share(r)} | "
            f"{lost['lost_tokens'] / full:.1%} | "
            f"{c['swa_tombstoned']} | {c['swa_evicted']} | {c['mamba_missing']} | "
            f"{c['mamba_evicted']} | {at} |"
        )
    (out / f"hybrid_hits_{args.label}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
