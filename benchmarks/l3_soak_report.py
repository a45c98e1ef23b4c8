"""The L3 fault soak's report (`l3_soak`): per lane, per fault kind, and the longest waits."""

from __future__ import annotations

from typing import Any

from benchmarks.l3_watch import Longest


def render(
    rows: list[dict[str, Any]],
    waits: Longest,
    timeout_s: float,
    prefetch_max_s: float,
    window: int,
) -> str:
    """Markdown: a row per lane, a row per kind of fault (L3 hits in the `window`
    operations before it and after its removal), the longest waits and calls."""
    ops = sum(r["ops"] for r in rows)
    wall = sum(r["wall_s"] for r in rows)
    lines = [
        "| config | store | ops | ops/s | checks | violations | leaked | pages read back | "
        "wrong data | L3 hit tokens | faults | breaker trips | L3 off | corrupt / repaired |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        s = r["store_stats"]
        lines.append(
            f"| {r['config']} | {r['store']} | {r['ops']:,} | {r['ops_per_s']:,.0f} | "
            f"{r['invariant_checks']:,} | {r['violations']} | {sum(r['leaked'].values())} | "
            f"{r['pages_checked']:,} | {r['wrong_data']} | {r['l3_hit_tokens']:,} | "
            f"{len(r['faults'])} | {s['breaker_trips']} | {s['off_s']:.1f} s | "
            f"{s['pages_corrupt']:,} / {s['pages_repaired']:,} |"
        )
    bad = sum(r["violations"] + sum(r["leaked"].values()) + r["wrong_data"] for r in rows)
    lines += [
        "",
        f"Total: {ops:,} operations in {wall:,.0f} s ({ops / max(wall, 1e-9):,.0f} ops/s), "
        f"{sum(len(r['faults']) for r in rows)} faults, violations + leaks + wrong data: {bad}.",
        "",
        "| fault | injected | pages touched | L3 hit tokens per 1,000 ops: before | while on | "
        "after removal | hits came back (had hits before) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        for f in r["faults"]:
            by_kind.setdefault(f["kind"], []).append(f)
    for kind, faults in sorted(by_kind.items()):
        had = [f for f in faults if f["hits_before"] > 0]
        back = sum(1 for f in had if f["hits_after"] > 0)
        on_ops = sum(f["ops_end"] - f["ops_start"] for f in faults)
        lines.append(
            f"| {kind} | {len(faults)} | {sum(f['pages'] for f in faults)} | "
            f"{sum(f['hits_before'] for f in faults) / len(faults) * 1000 / window:,.0f} | "
            f"{sum(f['hits_during'] for f in faults) * 1000 / max(on_ops, 1):,.0f} | "
            f"{sum(f['hits_after'] for f in faults) / len(faults) * 1000 / window:,.0f} | "
            f"{back} ({len(had)}) |"
        )
    longest: dict[str, float] = {}
    for r in rows:
        for name, took in r["longest_cache_call_s"].items():
            longest[name] = max(longest.get(name, 0.0), took)
    waited = longest.pop("wait_prefetch", 0.0)
    cache_call = max(longest.items(), key=lambda c: c[1], default=("none", 0.0))
    lines += [
        "",
        f"Longest wait on a Redis server: connect {waits.seconds.get('connect', 0.0):.3f} s, "
        f"reply {waits.seconds.get('reply', 0.0):.3f} s (client timeout {timeout_s} s each); "
        f"waits past {waits.limit_s} s: connect {waits.over.get('connect', 0)} of "
        f"{waits.count.get('connect', 0):,}, reply {waits.over.get('reply', 0)} of "
        f"{waits.count.get('reply', 0):,}.",
        f"Longest cache call: `{cache_call[0]}` {cache_call[1]:.3f} s; longest prefetch wait "
        f"{waited:.3f} s (its deadline at most {prefetch_max_s} s).",
    ]
    lines += ["", *store_calls(rows, timeout_s), ""]
    stall = max(r.get("process_stall_s", 0.0) for r in rows)
    lines.append(
        f"The process itself stalled (a 10 ms sleep woke late) by up to {stall:.3f} s, "
        f"{sum(r.get('process_stalls', 0) for r in rows):,} times by more than 50 ms."
    )
    notices: dict[str, int] = {}
    errors = [e for r in rows for e in r["fault_errors"]]
    for r in rows:
        for words, n in r["notices"].items():
            notices[words] = notices.get(words, 0) + n
    printed = ", ".join(f'"{w}" {n}' for w, n in sorted(notices.items()))
    lines.append(f"Lines L3 printed: {printed or 'none'}.")
    if errors:
        lines.append(f"Faults that could not be injected: {len(errors)} (first: {errors[0]}).")
    return "\n".join(lines)


def store_calls(rows: list[dict[str, Any]], timeout_s: float) -> list[str]:
    """Per store and call kind: the longest call, how many took longer than the timeout
    (plus the soak's slack for a thread waiting for a core), and the longest stall of the
    process itself in the lane of that longest call (the floor under any call's time)."""
    merged: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        for name, took in r["longest_store_call_s"].items():
            m = merged.setdefault((r["store"], name), [0.0, 0, 0, 0.0])
            if took > m[0]:
                m[0], m[3] = took, r.get("process_stall_s", 0.0)
            m[1] += r.get("store_calls", {}).get(name, 0)
            m[2] += r.get("store_calls_over", {}).get(name, 0)
    lines = [
        f"| store | call | calls | longest | past {timeout_s} s + slack | process stall "
        "(that lane) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for (store, name), (longest, count, over, stall) in sorted(merged.items()):
        lines.append(
            f"| {store} | `{name}` | {count:,.0f} | {longest:.3f} s | {over:,.0f} | {stall:.3f} s |"
        )
    return lines
