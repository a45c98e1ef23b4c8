"""What `uniradix replay` tells a user about L3: hits by tier with storage, pages written
and kept, how long L3 was off and what that skipped, leaks per instance, the URL schemes."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from uniradix.cli import main

ARGV = ["replay", "--config", "full", "--page-size", "16", "--max-requests", "60"]
ARGV += ["--full-tokens", "3000", "--host-tokens", "6000", "--no-progress"]


def replay_json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:  # type: ignore[type-arg]
    assert main([*ARGV, "--json", "--check-invariants", *extra]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_a_second_run_on_a_store_hits_it_and_writes_only_new_pages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"file://{tmp_path}"
    first = replay_json(capsys, "--storage", url)
    store = first["storage"]
    assert store["pages_written"] > 0 and store["pages_kept"] == 0 and store["off_s"] == 0
    second = replay_json(capsys, "--storage", url)
    by_tier = second["hit_tokens_by_tier"]
    assert by_tier["storage"] > 0
    assert sum(by_tier.values()) == second["hit_tokens"]
    assert second["hit_tokens"] > first["hit_tokens"]
    # The second run's backups mostly find their pages stored: kept, not written again.
    again = second["storage"]
    assert again["pages_kept"] > 0 and again["pages_written"] < store["pages_written"]
    assert second["leaked"] == {"full": 0, "host_full": 0, "req": 0}
    assert main([*ARGV, "--storage", url]) == 0
    text = capsys.readouterr().out
    (line,) = [row for row in text.splitlines() if row.startswith("| hit tokens by tier")]
    assert f"storage {by_tier['storage']}" in line
    assert "| L3 off (breaker) | 0.0 s, 0 trips, state closed" in text


def test_an_unreachable_store_is_said_once_and_skipped(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="uniradix.storage"):
        summary = replay_json(capsys, "--storage", "redis://127.0.0.1:1/0?timeout_s=0.2")
    lines = [r.getMessage() for r in caplog.records if r.name == "uniradix.storage"]
    assert lines[0].startswith("uniradix: L3 store redis://127.0.0.1:1/0 failed (")
    assert "is off" in lines[1] and "requests go on without it" in lines[1]
    assert len(lines) <= 6  # one per change of state, whatever the number of requests
    store, tier = summary["storage"], summary["storage"]["tier"]
    assert store["breaker_trips"] == 1 and store["off_s"] > 0
    # Three failures opened the breaker; later ones are probes, one per (doubling) cool-down.
    assert store["failed_ops"] >= 3 and store["last_error"].startswith("ConnectionError")
    assert tier["off_backup_pages"] > 0 and tier["stored_pages"] == 0
    assert summary["hit_tokens_by_tier"]["storage"] == 0
    assert summary["leaked"] == {"full": 0, "host_full": 0, "req": 0}


def test_instances_report_leaks_and_invariant_checks(capsys: pytest.CaptureFixture[str]) -> None:
    summary = replay_json(capsys, "--instances", "2", "--storage", "file")
    for inst in summary["instances"]:
        assert inst["leaked"] == {"full": 0, "host_full": 0, "req": 0}
        assert inst["invariant_checks"] > 0
        assert inst["storage_tier"]["backup_pages_submitted"] > 0
    assert summary["storage"]["pages_written"] > 0
    assert set(summary["hit_tokens_by_tier"]) == {"device", "host", "storage"}


def test_storage_help_lists_every_scheme(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for scheme in ("file://DIR", "redis://[:PASSWORD@]HOST:PORT/DB", "rediss://", "redis+cluster"):
        assert scheme in help_text
