"""Traces a new user wrote by hand: one line naming the value and exit status 2, or a row
rejected on its own as the README promises; and `uniradix replay | head` ends quietly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from uniradix.cli import main

ARGV = ["replay", "--config", "full", "--no-progress"]


def write(path: Path, rows: list[object]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main([*ARGV, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1  # one line, no traceback
    return err


def test_an_output_length_written_as_a_float_is_rejected_per_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = {"timestamp": 0, "input_length": 600, "hash_ids": [1, 2]}
    rows = [{**row, "output_length": 1e11}, {**row, "timestamp": 1, "output_length": 3}]
    trace = write(tmp_path / "t.jsonl", rows)
    (tmp_path / "t.jsonl").write_text((tmp_path / "t.jsonl").read_text().replace("1e+11", "1e11"))
    assert main([*ARGV, "--json", "--trace", trace]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"] == 1 and summary["rejected"] == 1  # as the integer 10**11 is
    err = fails(capsys, "--trace", write(tmp_path / "f.jsonl", [{**row, "output_length": 2.5}]))
    assert "f.jsonl:1: output_length must be an integer >= 1, got 2.5" in err


def test_an_empty_trace_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.jsonl").write_text("\n\n")
    err = fails(capsys, "--trace", str(tmp_path / "empty.jsonl"))
    assert "empty.jsonl: the trace has no requests" in err and "full_tokens" not in err


def test_a_token_list_trace_without_its_format_gets_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, row in [("a", [1, 2, 3]), ("b", {"token_ids": [1, 2, 3]})]:
        err = fails(capsys, "--trace", write(tmp_path / f"{name}.jsonl", [row]))
        assert f"{name}.jsonl:1: expected a JSON object with hash_ids" in err
        assert "--trace-format tokens" in err


def test_a_negative_input_length_names_its_line_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = {"timestamp": 0, "input_length": -5, "output_length": 3, "hash_ids": [1]}
    err = fails(capsys, "--trace", write(tmp_path / "neg.jsonl", [row]))
    assert err.count("neg.jsonl:1") == 1 and "input_length must be an integer >= 1, got -5" in err


def test_a_closed_pipe_ends_the_command_quietly() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "uniradix.cli", *ARGV, "--max-requests", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is printed (`| head -0`)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert "Traceback" not in err and "BrokenPipe" not in err
