"""The L3 fault soak, short: a Redis store killed, filled, slowed and corrupted and a file
store corrupted while random cache traffic runs, each kind of fault at least twice. Every
page read back is what was written under its key, every invariant holds, nothing leaks, and
no wait on Redis hangs (`python -m benchmarks.l3_soak` runs a million operations)."""

from __future__ import annotations

import shutil

import pytest

from benchmarks.l3_soak import TIMEOUT_S, soak_lane
from benchmarks.l3_watch import Longest, TimedConnection

HANG_S = 5.0  # far above the 0.2 s client timeout: only a hang takes this long


@pytest.mark.parametrize(("config", "store"), [("full", "redis"), ("hybrid", "file")])
def test_soak_under_faults(config: str, store: str) -> None:
    if store == "redis" and shutil.which("redis-server") is None:
        pytest.skip("redis-server missing: scripts/setup.sh installs it")
    TimedConnection.waits = Longest(TIMEOUT_S)
    row = soak_lane(config, store, 6000, seed=3, gap_s=0.4, hold_s=(0.15, 0.4), min_each=2)
    kinds = {f["kind"] for f in row["faults"]}
    assert all(sum(f["kind"] == k for f in row["faults"]) >= 2 for k in kinds)
    assert len(kinds) == (6 if store == "redis" else 3), kinds
    assert row["fault_errors"] == []
    assert row["ops"] >= 4000 and row["invariant_checks"] >= 4
    assert row["violations"] == 0 and row["leaked"] == {}
    assert row["pages_checked"] > 0 and row["wrong_data"] == 0, row["wrong_examples"]
    assert row["l3_hit_tokens"] > 0
    if store == "redis":
        assert max(TimedConnection.waits.seconds.values()) < HANG_S
