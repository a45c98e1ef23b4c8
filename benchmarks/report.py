"""Markdown tables for `benchmarks/side_by_side.py` results (per-call microseconds)."""

from __future__ import annotations

from typing import Any

SIDES = ("uniradix", "sglang_python", "sglang_rust")
TIMED = ("match", "insert", "evict")


def _op(side: dict[str, Any], op: str, key: str = "median_us") -> float | None:
    stats = side.get("ops", {}).get(op)
    return None if stats is None else float(stats[key])


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or not theirs:
        return "-"
    return f"{ours / theirs:.2f}"


def _stream_rows(results: list[dict[str, Any]], part: str) -> list[str]:
    head = (
        "| config | workload | page | side | match med / p99 | +idx med | insert med / p99 "
        "| evict med / p99 | wall s | hit rate | heap B/token |"
    )
    rows = [head, "|" + " --- |" * 11]
    for entry in results:
        job = entry["job"]
        if job["part"] != part:
            continue
        for name in SIDES:
            side = entry["sides"].get(name)
            if side is None:
                continue
            match, idx = _op(side, "match"), _op(side, "prefix_indices")
            cells = [
                job["config"],
                job["stream"]["workload"] if part == "streams" else f"pool {job['pool_tokens']}",
                str(job["page_size"]),
                name,
                f"{_num(match)} / {_num(_op(side, 'match', 'p99_us'))}",
                _num(None if match is None or idx is None else match + idx),
                f"{_num(_op(side, 'insert'))} / {_num(_op(side, 'insert', 'p99_us'))}",
                f"{_num(_op(side, 'evict'))} / {_num(_op(side, 'evict', 'p99_us'))}",
                _num(side["wall_s"], 2),
                f"{side['hit_rate']:.4f}",
                _num(side.get("heap_bytes_per_cached_token")),
            ]
            rows.append("| " + " | ".join(cells) + " |")
    return rows


def _ratio_rows(results: list[dict[str, Any]], part: str) -> list[str]:
    head = "| config | workload | page | vs | match | match+idx | insert | evict | wall |"
    rows = [head, "|" + " --- |" * 9]
    for entry in results:
        job, sides = entry["job"], entry["sides"]
        ours = sides.get("uniradix")
        if job["part"] != part or ours is None:
            continue
        for name in ("sglang_rust", "sglang_python"):
            theirs = sides.get(name)
            if theirs is None:
                continue
            both = [
                (_op(s, "match") or 0.0) + (_op(s, "prefix_indices") or 0.0) for s in (ours, theirs)
            ]
            cells = [
                job["config"],
                job["stream"]["workload"] if part == "streams" else f"pool {job['pool_tokens']}",
                str(job["page_size"]),
                name.removeprefix("sglang_"),
                _ratio(_op(ours, "match"), _op(theirs, "match")),
                _ratio(both[0], both[1]),
                _ratio(_op(ours, "insert"), _op(theirs, "insert")),
                _ratio(_op(ours, "evict"), _op(theirs, "evict")),
                _ratio(ours["wall_s"], theirs["wall_s"]),
            ]
            rows.append("| " + " | ".join(cells) + " |")
    return rows


def _scale_rows(results: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| side | cached tokens | key tokens | match med / p99 | insert med / p99 "
        "| heap B/token | RSS B/token |",
        "|" + " --- |" * 7,
    ]
    for entry in results:
        if entry["job"]["part"] != "scale":
            continue
        for name in SIDES:
            side = entry["sides"].get(name)
            for r in side["rows"] if side else []:
                rows.append(
                    f"| {name} | {r['tree_tokens']} | {r['key_len']} | "
                    f"{_num(r['match_median_us'])} / {_num(r['match_p99_us'])} | "
                    f"{_num(r['insert_median_us'])} / {_num(r['insert_p99_us'])} | "
                    f"{_num(r.get('heap_bytes_per_token'))} | "
                    f"{_num(r.get('rss_bytes_per_token'))} |"
                )
    return rows


def render(doc: dict[str, Any]) -> str:
    results = doc["results"]
    cores = {
        s.get("tree_core_class")
        for e in results
        for n, s in e["sides"].items()
        if n.startswith("sglang")
    }
    digests = {
        (i, s["stream_digest"])
        for i, e in enumerate(results)
        for s in e["sides"].values()
        if "stream_digest" in s
    }
    same = len(digests) == len({i for i, _ in digests})
    out = [
        f"Command: `{doc['command'].strip()}`  ",
        f"Machine: {doc['machine']['platform']}, Python {doc['machine']['python']}; "
        f"SGLang tree cores built: {', '.join(sorted(c for c in cores if c)) or 'none'}",
        "",
        f"Every side played the identical request stream (SHA-256 digests): "
        f"{'yes' if same else 'NO - results not comparable'}",
        "",
        "Median / p99 microseconds per call. `+idx` adds the prefix-slot gather "
        "(SGLang 0.5.23 returns no slots with a match; uniradix does).",
        "",
    ]
    for part, title in (("streams", "Workloads"), ("mooncake", "Mooncake trace")):
        if any(e["job"]["part"] == part for e in results):
            out += [f"### {title}", "", *_stream_rows(results, part), ""]
            out += [f"### {title}: uniradix / SGLang (median; < 1 is faster)", ""]
            out += [*_ratio_rows(results, part), ""]
    if any(e["job"]["part"] == "scale" for e in results):
        out += ["### Scale (page 1, no eviction)", "", *_scale_rows(results), ""]
    return "\n".join(out)
