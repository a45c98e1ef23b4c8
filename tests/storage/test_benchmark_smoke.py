"""The storage benchmark runs end to end on tiny sizes (no timing asserted)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.storage import bench_file, bench_hashing, bench_redis, render
from benchmarks.storage_capacity import fill
from benchmarks.storage_capacity import render as render_capacity

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
