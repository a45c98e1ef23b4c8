"""Replay reports: the JSON summary, a Markdown summary and PNG plots.

Plots need matplotlib (`pip install uniradix[plots]`); without it `write_report` writes the
JSON and Markdown files and raises `RuntimeError` saying what is missing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from uniradix.sim.replay import ReplayResult

MAX_PLOT_POINTS = 4000


def summary_json(result: ReplayResult) -> str:
    return json.dumps(result.summary, sort_keys=True)


def markdown_summary(result: ReplayResult) -> str:
    s = result.summary
    flops = s["prefill_flops"]
    lines = [
        f"# uniradix replay: {s['source']} ({s['config']}, page size {s['page_size']})",
        "",
        "| metric | value |",
        "|---|---|",
        f"| requests | {s['requests']} ({s['rejected']} rejected as too long) |",
        f"| prompt tokens | {s['prompt_tokens']} |",
        f"| hit tokens | {s['hit_tokens']} ({s['hit_rate']:.2%}) |",
        f"| hit tokens by tier | {_by_tier(s['hit_tokens_by_tier'])} |",
        *_storage_rows(s.get("storage")),
        f"| ideal hit tokens (unbounded cache) | {s['ideal_hit_tokens']} "
        f"({s['ideal_hit_rate']:.2%}) |",
        f"| session follow-up turns: hit rate (unbounded cache) | "
        f"{s['session_followup_hit_rate']:.2%} ({s['session_followup_ideal_hit_rate']:.2%}) |",
        f"| other requests: hit rate (unbounded cache) | "
        f"{s['other_hit_rate']:.2%} ({s['other_ideal_hit_rate']:.2%}) |",
        f"| sessions opened / released / evicted while covered | "
        f"{s['sessions']['opened']} / {s['sessions']['released']} / "
        f"{s['sessions']['evicted_while_covered']} |",
        f"| decode tokens | {s['decode_tokens']} |",
        f"| retractions | {s['retractions']} ({s['recomputed_tokens']} tokens recomputed) |",
        f"| tombstones at the end | {s['tombstones']} |",
        f"| scheduler steps | {s['steps']} |",
        f"| invariant checks | {s['invariant_checks']} |",
        f"| wall time | {s['wall_s']:.2f} s ({s['requests_per_s']:.1f} requests/s) |",
        f"| prefill FLOPs saved (estimate) | {flops['saved']:.3e} of {flops['total']:.3e} "
        f"({flops['saved_fraction']:.2%}) |",
        "",
        "| pool | capacity | peak used | final used | evicted | hit tokens | leaked |",
        "|---|---|---|---|---|---|---|",
    ]
    for pool, c in s["components"].items():
        lines.append(
            f"| {pool} | {c['capacity']} | {c['peak_used']} | {c['final_used']} | "
            f"{c['evicted']} | {c.get('hit_tokens', '-')} | {s['leaked'][pool]} |"
        )
    if "budget" in s:  # pools sized from a model and a byte budget (uniradix.plan)
        b = s["budget"]
        lines += [
            "",
            f"Budget: {b['gpu_bytes']:,} bytes for {b['model']} ({b['unused_bytes']:,} unused "
            f"after rounding to whole pages of {b['page_size']} and whole slots)",
            "",
            "| pool | share | bytes | units | bytes per unit |",
            "|---|---|---|---|---|",
        ]
        for pool in b["split"]:
            c = s["components"][pool]
            lines.append(
                f"| {pool} | {c['fraction']:.1%} | {c['bytes']:,} | {c['units']:,} {c['unit']} | "
                f"{c['bytes_per_unit']:,} |"
            )
    lost = s.get("lost_hits")
    if lost:
        full = max(lost["full_kv_hit_tokens"], 1)
        lines += [
            "",
            f"Lost hybrid hits: {lost['lost_tokens']} of {lost['full_kv_hit_tokens']} full-KV "
            f"hit tokens ({lost['lost_tokens'] / full:.2%}, {lost['lost_requests']} requests); "
            f"{lost['both_tokens']} lost to SWA and Mamba at once.",
            "",
            "| cause | lost tokens | of full-KV hits |",
            "|---|---|---|",
        ]
        for cause, num in lost["causes"].items():
            lines.append(f"| {cause} | {num} | {num / full:.2%} |")
    return "\n".join(lines) + "\n"


def _by_tier(by_tier: dict[str, int]) -> str:
    """`device 10, host 20, storage 30` (storage: L3 hits, loaded back through the host)."""
    return ", ".join(f"{tier} {num}" for tier, num in by_tier.items())


def _storage_rows(storage: dict[str, Any] | None) -> list[str]:
    """The L3 rows: what moved, and how long L3 was off and what that skipped."""
    if storage is None:
        return []
    tier = storage["tier"]
    rows = [
        f"| L3 pages written / kept / read / missed / repaired | {storage['pages_written']} / "
        f"{storage['pages_kept']} / {storage['pages_read']} / {storage['pages_missed']} / "
        f"{storage['pages_repaired']} |",
        f"| L3 off (breaker) | {storage['off_s']:.1f} s, {storage['breaker_trips']} trips, "
        f"state {storage['breaker_state']}; skipped {tier['off_backup_pages']} backup pages, "
        f"{tier['off_probes']} probes of {tier['off_probe_tokens']} prompt tokens (the most "
        "L3 could have hit) |",
    ]
    if storage["last_error"]:
        rows.append(f"| L3 last error | {storage['last_error']} |")
    return rows


def _thin(values: list[Any]) -> tuple[list[int], list[Any]]:
    stride = max(1, len(values) // MAX_PLOT_POINTS)
    xs = list(range(0, len(values), stride))
    return xs, [values[i] for i in xs]


def _plot_hits_by_tier(plt: Any, result: ReplayResult, path: Path) -> Path:
    """Cumulative hit rate split into hits found on the device and hits loaded back."""
    xs, total = _thin(result.cumulative_hit_rate)
    _, host = _thin(result.cumulative_host_hit_rate)
    device = [t - h for t, h in zip(total, host, strict=True)]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.stackplot(xs, device, host, labels=["device (L1)", "host (L2), loaded back"])
    ax.set(xlabel="requests admitted", ylabel="cumulative hit rate", ylim=(0, 1))
    ax.legend(loc="lower right")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def headless_pyplot(written: list[Path]) -> Any:
    """matplotlib's pyplot drawing to files only; without matplotlib, a RuntimeError saying
    which files of the report (`written`) were written all the same."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError(
            f"plots need matplotlib (pip install 'uniradix[plots]'); wrote only {written}"
        ) from None
    return plt


def write_report(result: ReplayResult, directory: str | Path) -> list[Path]:
    """Writes summary.json, summary.md and the plots into `directory`; returns the paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "summary.json", out / "summary.md"]
    written[0].write_text(json.dumps(result.summary, indent=2, sort_keys=True) + "\n")
    written[1].write_text(markdown_summary(result))
    plt = headless_pyplot(written)

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(*_thin(result.cumulative_hit_rate), label="replay")
    ax.plot(*_thin(result.ideal_cumulative_hit_rate), "--", label="ideal (unbounded cache)")
    ax.set(xlabel="requests admitted", ylabel="cumulative hit rate", ylim=(0, 1))
    ax.legend()
    written.append(out / "hit_rate.png")
    fig.savefig(written[-1], dpi=100, bbox_inches="tight")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    for pool, used in result.timeline.items():
        capacity = result.summary["components"][pool]["capacity"]
        xs, ys = _thin(used)
        ax.plot(xs, [u / capacity for u in ys], label=f"{pool} ({capacity} slots)")
    ax.set(xlabel="scheduler step", ylabel="pool occupancy", ylim=(0, 1.05))
    ax.legend()
    written.append(out / "occupancy.png")
    fig.savefig(written[-1], dpi=100, bbox_inches="tight")
    plt.close(fig)

    if "host_tier" in result.summary:
        written.append(_plot_hits_by_tier(plt, result, out / "hits_by_tier.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(result.hit_lengths, bins=50)
    ax.set(xlabel="hit length (tokens)", ylabel="requests")
    written.append(out / "hit_lengths.png")
    fig.savefig(written[-1], dpi=100, bbox_inches="tight")
    plt.close(fig)

    lost = result.summary.get("lost_hits")
    if lost:
        fig, ax = plt.subplots(figsize=(7, 4))
        names = ["full-KV match", "usable", *lost["causes"]]
        values = [lost["full_kv_hit_tokens"], lost["usable_hit_tokens"], *lost["causes"].values()]
        ax.bar(names, values, color=["tab:gray", "tab:green"] + ["tab:red"] * len(lost["causes"]))
        ax.set(ylabel="tokens (first admissions)", title="hybrid hits lost, by cause")
        ax.tick_params(axis="x", labelrotation=30)
        written.append(out / "lost_hits.png")
        fig.savefig(written[-1], dpi=100, bbox_inches="tight")
        plt.close(fig)
    return written
