"""`benchmarks.hit_table` and the oracles it runs, on tiny traces."""

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.hit_table import (
    BUDGETS,
    ORACLE,
    as_default,
    label,
    main,
    markdown,
    measure,
    orders,
    row,
    sized,
)
from benchmarks.traces.suite import JUDGE, SuiteTrace, base
from benchmarks.traces.trace_io import CACHE_ENV, token_row, write_jsonl
from uniradix.sim.replay import ReplayOptions


def repeats(tmp_path: Path) -> Path:
    """Five prompts of ten pages and a token, each sent four times, in shuffled rounds: every
    hit is a whole prompt, served by the one Mamba state at its end."""
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 1 << 30, size=161).tolist() for _ in range(5)]
    order = [i for _ in range(4) for i in rng.permutation(5)]
    return write_jsonl(tmp_path / "repeats.jsonl", [token_row(prompts[i], [7]) for i in order])


def test_the_mamba_oracle_bounds_every_order_where_it_is_a_bound(tmp_path: Path) -> None:
    """One request at a time, a full pool holding everything, one state per hit: Belady is
    optimal, so the oracle hits at least as much as every order, and more than LRU where the
    slots are short of the five prompts."""
    options = ReplayOptions.of(
        trace=str(repeats(tmp_path)),
        trace_format="tokens",
        page_size=16,
        full_tokens=1 << 16,
        max_running=1,
        checkpoint_grid=None,
    )
    for slots in (3, 4):
        opts = options.updated(mamba_slots=slots)
        rates = {order: measure(opts, "mamba", order)["hit_rate"] for order in orders("mamba")}
        assert rates[ORACLE] >= max(rates.values())
        assert rates[ORACLE] > rates["lru"]


def test_budgets_grow_and_the_table_marks_the_judging_half(tmp_path: Path) -> None:
    trace = SuiteTrace("repeats", JUDGE, base(trace=str(repeats(tmp_path)), trace_format="tokens"))
    pools = [sized(trace.options, *BUDGETS[b]) for b in ("tight", "mid", "ample")]
    assert [p.pools.full_tokens for p in pools] == sorted(p.pools.full_tokens for p in pools)
    assert all(p.pools.mamba_slots is not None and p.pools.mamba_slots >= 16 for p in pools)
    opts = pools[0]
    full = measure(opts, "full", "full")
    rows = [row(trace, "tight", opts, "full", "full", full, full["hit_rate"])]
    for order in orders("mamba"):
        s = measure(opts, "mamba", order)
        rows.append(row(trace, "tight", opts, "mamba", order, s, full["hit_rate"]))
    assert rows[-1]["hits_per_mamba_slot"] == rows[-1]["hit_tokens"] / opts.pools.mamba_slots
    table = markdown(rows, "--traces repeats")
    line = next(x for x in table.splitlines() if x.startswith("| repeats | tight"))
    assert "**judge**" in line and f"{full['hit_rate']:.4f}" in line
    assert "### swa" not in table


def test_the_command_writes_the_table_and_a_rerun_measures_nothing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    argv = ["--traces", "multi_turn/s0", "--budgets", "tight", "--configs", "mamba"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    lines = (tmp_path / "hit_table.jsonl").read_text().splitlines()
    assert [json.loads(x)["order"] for x in lines] == ["full", *map(label, orders("mamba"))]
    table = (tmp_path / "hit_table.md").read_text()
    assert "| multi_turn/s0 | tight | tune |" in table and "Judging cells" in table
    assert not (tmp_path / "cache").exists()  # no other trace was generated
    assert main([*argv, "--out", str(tmp_path)]) == 0
    assert (tmp_path / "hit_table.jsonl").read_text().splitlines() == lines


def test_every_order_is_scored_as_if_it_were_the_default() -> None:
    """One judging cell: LRU at 0.5 against the default's 0.6 and the retired orders' 0.4
    (and the oracle's 0.6) meets neither target; the default meets both."""
    rates = {"lru": 0.5, "reuse_credit": 0.6, "branch_aware": 0.4, "flop_aware": 0.4}
    rows = [
        {"config": "mamba", "half": "judge", "trace": "t", "budget": "b", "order": o, "hit_rate": v}
        for o, v in {**rates, ORACLE: 0.6}.items()
    ]
    lines = {line.split(":")[0]: line for line in as_default(rows)}
    assert "in 0 of 1; >= 0.9 x the oracle in 0 of the 1" in lines["mamba lru"]
    assert "in 1 of 1; >= 0.9 x the oracle in 1 of the 1" in lines["mamba reuse_credit"]
