"""The storage benchmark runs end to end on tiny sizes (no timing asserted)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.l3_scaleout import HEADING, replace_section
from benchmarks.storage import bench_file, bench_hashing, bench_redis, render
from benchmarks.storage_capacity import fill
from benchmarks.storage_capacity import render as render_capacity
from benchmarks.storage_cluster import bench_cluster, render_cluster

from .conftest import RedisServer


def test_benchmark_runs_and_renders(tmp_path: Path, redis_server: RedisServer) -> None:
    results = {
        "hashing": bench_hashing(1024),
        "file": bench_file(tmp_path, num_pages=2, page_bytes=4096, rounds=1),
        "redis": bench_redis(redis_server.url, num_pages=2, page_bytes=4096, rounds=1),
    }
    assert all(v > 0 for part in results.values() for v in part.values())
    text = render(results, "tiny")
    assert "| file | get |" in text and "probes/s" in text


def test_capacity_benchmark_stays_under_the_cap(tmp_path: Path) -> None:
    row = fill(tmp_path, cap=16 << 10, num_pages=400, page_bytes=0)
    assert 0 < row["pages"] < 400 and row["counted"] == row["du"] <= 16 << 10
    assert "| 16,384 |" in render_capacity([row])


def test_cluster_benchmark_runs_and_renders(
    redis_server: RedisServer, redis_cluster: list[RedisServer]
) -> None:
    cluster_url = f"redis+cluster://127.0.0.1:{redis_cluster[0].port}?timeout_s=10"
    rows = bench_cluster(redis_server.url, cluster_url, [(3, 4096), (20, 8)], rounds=1)
    assert [(r["pages"], r["page_bytes"]) for r in rows] == [(3, 4096), (20, 8)]
    assert all(v > 0 for row in rows for v in row.values())
    text = render_cluster(rows, "tiny")
    assert text.count("`batch_exists`") == 2 and "pages/s" in text


def test_scaleout_section_replaces_only_its_own(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    out.write_text("# Storage\n\nbefore\n\n## Other\n\nkept\n")
    replace_section(out, f"{HEADING} (first 10 requests)\n\nold table\n")
    replace_section(out, f"{HEADING} (all 40 requests)\n\nwhole trace\n")
    replace_section(out, f"{HEADING} (first 10 requests)\n\nnew table\n")
    text = out.read_text()
    assert text.count(HEADING) == 2 and "old table" not in text
    assert text.startswith("# Storage\n\nbefore\n\n## Other\n\nkept\n")
    assert text.index("new table") < text.index("whole trace")  # replaced in place
