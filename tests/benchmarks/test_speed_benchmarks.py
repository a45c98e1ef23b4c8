"""benchmarks.chunk_cost and benchmarks.long_agentic_trace run end to end on small sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import chunk_cost, long_agentic_trace


def test_chunk_cost_reports_one_row_per_length(capsys: pytest.CaptureFixture[str]) -> None:
    assert chunk_cost.main(["--lengths", "256", "1024", "--chunk", "128", "--repeats", "1"]) == 0
    rows = json.loads(capsys.readouterr().out.splitlines()[-1])["rows"]
    assert [r["prompt_tokens"] for r in rows] == [256, 1024]
    assert all(r["us_per_chunk"] > 0 for r in rows)


def test_chunk_cost_with_events_records_each_chunks_events(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--lengths", "512", "--chunk", "128", "--repeats", "1", "--events"]
    assert chunk_cost.main(argv) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["events"] is True and report["rows"][0]["us_per_chunk"] > 0


def test_agentic_trace_has_the_long_context_shape(tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    assert long_agentic_trace.main(["generate", str(out), "--requests", "80", "--seed", "3"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 80
    lengths = [r["input_length"] for r in rows]
    assert min(lengths) >= long_agentic_trace.SHARED_TOKENS
    assert max(lengths) <= long_agentic_trace.MAX_CONTEXT
    for r in rows:  # whole 512-token blocks, only the last one partial
        assert len(r["hash_ids"]) == -(-r["input_length"] // long_agentic_trace.BLOCK)
        assert r["hash_ids"][:62] == list(range(62))  # the shared system prompt
    assert [r["timestamp"] for r in rows] == sorted(r["timestamp"] for r in rows)
    again = tmp_path / "again.jsonl"
    long_agentic_trace.main(["generate", str(again), "--requests", "80", "--seed", "3"])
    assert again.read_text() == out.read_text()


def test_agentic_replay_reports_cpu_seconds_and_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.jsonl"
    long_agentic_trace.main(["generate", str(trace), "--requests", "4", "--seed", "1"])
    capsys.readouterr()
    assert long_agentic_trace.main(["replay", str(trace), "--tree", "."]) == 0
    out = capsys.readouterr().out
    cpu = float(out.split(" CPU s")[0].rsplit(" ", 1)[1])
    assert cpu > 0 and "report digest " in out
