"""`benchmarks.studies.swa_fresh_windows`: its rules run clean, and on `bursts/s1` the two
that decide by a prior beat the default while the one that waits for outcomes does not."""

from pathlib import Path

import pytest

from benchmarks.hit_table import BUDGETS, measure, sized
from benchmarks.studies.swa_fresh_windows import RULES
from benchmarks.traces.suite import suite
from benchmarks.traces.trace_io import CACHE_ENV


def test_prior_rules_win_bursts_and_the_learning_rule_learns_too_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    (trace,) = suite(only=["bursts/s1"], log=[])
    opts = sized(trace.options, *BUDGETS["ample"])
    rates = {name: measure(opts, "swa", policy)["hit_rate"] for name, policy in RULES.items()}
    assert rates["own_depth"] > rates["reuse_credit"]
    assert rates["past_measured"] > rates["reuse_credit"]
    assert rates["past_censored"] <= rates["reuse_credit"]
