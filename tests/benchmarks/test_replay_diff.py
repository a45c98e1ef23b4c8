"""benchmarks.replay_diff: timings are ignored, any other change is reported."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.replay_diff import main


def _write(path: Path, doc: dict[str, object]) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def test_timings_differ_only(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.json", {"hit_rate": 0.5, "wall_s": 3.0, "ideal_s": 1.0})
    b = _write(tmp_path / "b.json", {"hit_rate": 0.5, "wall_s": 1.0, "ideal_s": 0.2})
    assert main([a, b]) == 0


def test_a_changed_result_is_reported(tmp_path: Path, capsys: object) -> None:
    a = _write(tmp_path / "a.json", {"components": {"full": {"evicted": 10}}, "wall_s": 3.0})
    b = _write(tmp_path / "b.json", {"components": {"full": {"evicted": 11}}, "wall_s": 3.0})
    assert main([a, b]) == 1
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert ".components.full.evicted: 10 != 11" in out
