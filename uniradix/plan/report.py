"""`uniradix plan` reports: a Markdown table, the JSON result, and a PNG of hit rate against
memory (best and even split) beside the hit rate of every split tried, per budget.

Plots need matplotlib (`pip install uniradix[plots]`); without it `write_plan_report` writes
the JSON and Markdown files and raises `RuntimeError` saying what is missing.
"""

from __future__ import annotations

import json
from pathlib import Path

from uniradix.plan.sweep import PlanPoint, PlanResult
from uniradix.sim.report import headless_pyplot

GB = 10**9


def _pools(point: PlanPoint) -> str:
    return ", ".join(
        f"{pool} {p['units']} {p['unit']} ({p['bytes'] / GB:.2f} GB)"
        for pool, p in point.pools.items()
    )


def _split(point: PlanPoint) -> str:
    return ", ".join(f"{pool} {share:.1%}" for pool, share in point.split.items())


def markdown_plan(result: PlanResult) -> str:
    unit = ", ".join(f"{pool} {n:,} B" for pool, n in result.model.unit_bytes().items())
    lines = [
        f"# uniradix plan: {result.model.name} (page size {result.page_size})",
        "",
        f"Bytes per unit: {unit} (full/swa: per token, mamba: per state slot); token pools "
        "are floored to whole pages.",
        f"{len(result.points)} replays in {result.wall_s:.1f} s.",
        "",
        "| GPU cache | best split | hit rate | even split | pools at the best split |",
        "|---|---|---|---|---|",
    ]
    even = {p.gpu_bytes: p for p in result.even}
    for best in result.best:
        e = even.get(best.gpu_bytes)
        rate = "-" if best.hit_rate is None else f"{best.hit_rate:.4f}"
        e_rate = "-" if e is None or e.hit_rate is None else f"{e.hit_rate:.4f}"
        lines.append(
            f"| {best.gpu_bytes / GB:g} GB | {_split(best)} | {rate} | {e_rate} | "
            f"{_pools(best) or best.error} |"
        )
    if result.knee_bytes is not None:
        lines += ["", f"Knee of the curve: {result.knee_bytes / GB:g} GB."]
    return "\n".join(lines) + "\n"


def write_plan_report(result: PlanResult, directory: str | Path) -> list[Path]:
    """Writes plan.json, plan.md and plan.png into `directory`; returns the paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "plan.json", out / "plan.md"]
    written[0].write_text(json.dumps(result.to_json(), indent=2) + "\n")
    written[1].write_text(markdown_plan(result))
    plt = headless_pyplot(written)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for points, style, label in ((result.best, "o-", "best split"), (result.even, "s--", "even")):
        shown = [q for q in points if q.hit_rate is not None]
        left.plot(
            [q.gpu_bytes / GB for q in shown], [q.hit_rate for q in shown], style, label=label
        )
    if result.knee_bytes is not None:
        left.axvline(result.knee_bytes / GB, color="red", lw=0.8, label="knee")
    left.set(xlabel="GPU cache (GB)", ylabel="hit rate", title=result.model.name, ylim=(0, 1))
    left.legend()
    # Right: hit rate against the share of one pool (the first auxiliary pool, or "full" for
    # a full-only model), one line per budget, the best split starred.
    pool = result.model.pools()[-1]
    for best in result.best:
        tried = sorted(
            (q for q in result.points if q.gpu_bytes == best.gpu_bytes and q.hit_rate is not None),
            key=lambda q: q.split[pool],
        )
        line = right.plot(
            [q.split[pool] for q in tried],
            [q.hit_rate for q in tried],
            ".-",
            label=f"{best.gpu_bytes / GB:g} GB",
        )
        if best.hit_rate is not None:
            right.plot(best.split[pool], best.hit_rate, "*", ms=12, color=line[0].get_color())
    right.set(
        xlabel=f"share of the budget given to {pool}", ylabel="hit rate", title="splits tried"
    )
    right.legend()
    written.append(out / "plan.png")
    fig.savefig(written[-1], dpi=90, bbox_inches="tight")
    plt.close(fig)
    return written
