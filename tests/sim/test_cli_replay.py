import json
from pathlib import Path

import pytest

from uniradix import InvariantError
from uniradix.cli import main
from uniradix.sim.metrics import ReplayMetrics
from uniradix.sim.scheduler import Scheduler

REQUIRED = {
    "requests",
    "prompt_tokens",
    "hit_tokens",
    "hit_rate",
    "ideal_hit_tokens",
    "ideal_hit_rate",
    "components",
    "leaked",
    "invariant_checks",
    "wall_s",
}


def test_json_mode_prints_one_object_and_nothing_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["replay", "--json", "--max-requests", "30", "--check-invariants"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert set(summary) >= REQUIRED
    assert summary["requests"] == 30
    assert summary["invariant_checks"] == summary["steps"] + 1
    assert set(summary["components"]["full"]) >= {"capacity", "peak_used", "evicted"}
    assert set(summary["components"]) == {"full", "swa", "mamba", "req"}
    assert err == ""


def test_report_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", "--workload", "shared_prefix", "--config", "full", "--page-size", "4"]
    assert main([*argv, "--max-requests", "20", "--report", str(tmp_path)]) == 0
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {
        "summary.json",
        "summary.md",
        "hit_rate.png",
        "occupancy.png",
        "hit_lengths.png",
    }
    assert json.loads((tmp_path / "summary.json").read_text())["requests"] == 20
    assert "| full |" in (tmp_path / "summary.md").read_text()
    out, err = capsys.readouterr()
    assert out.startswith("# uniradix replay: shared_prefix (full, page size 4)")
    assert "notice" not in err


def test_trace_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("[1, 2, 3, 4]\n[1, 2, 3, 5]\n")
    assert (
        main(
            [
                "replay",
                "--trace",
                str(trace),
                "--trace-format",
                "tokens",
                "--config",
                "full",
                "--json",
                "--max-running",
                "1",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"] == 2 and summary["hit_tokens"] == 3


def test_leak_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(ReplayMetrics, "leaked", lambda self: {"full": 3})
    assert main(["replay", "--json", "--max-requests", "5"]) == 1
    assert "leaked slots per pool: {'full': 3}" in capsys.readouterr().err


def test_invariant_violation_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(self: Scheduler) -> None:
        raise InvariantError("cache invariants violated:\n  full: made up")

    monkeypatch.setattr(Scheduler, "check_invariants", broken)
    assert main(["replay", "--json", "--max-requests", "5", "--check-invariants"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "full: made up" in err


def test_bad_input_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--trace", "/nonexistent.jsonl"]) == 2
    assert "error" in capsys.readouterr().err


def test_demo_still_works(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    assert "match" in capsys.readouterr().out
