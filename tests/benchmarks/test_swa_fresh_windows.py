"""`benchmarks.studies.swa_fresh_windows`: its rules run clean; on `bursts/s1` the two that
decide by a prior beat the former default while the one that waits for outcomes does not, and
the default (past windows worth nothing before any serve) beats them all."""

from pathlib import Path

import pytest

from benchmarks.hit_table import BUDGETS, measure, sized
from benchmarks.studies.swa_fresh_windows import RULES
from benchmarks.traces.suite import suite
from benchmarks.traces.trace_io import CACHE_ENV


def test_prior_rules_win_bursts_and_the_default_wins_them_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    (trace,) = suite(only=["bursts/s1"], log=[])
    opts = sized(trace.options, *BUDGETS["ample"])
    rates = {name: measure(opts, "swa", policy)["hit_rate"] for name, policy in RULES.items()}
    assert rates["own_depth"] > rates["output_windows"]
    assert rates["past_measured"] > rates["output_windows"]
    assert rates["past_censored"] <= rates["output_windows"]
    assert rates["reuse_credit"] == max(rates.values())
