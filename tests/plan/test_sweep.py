"""The plan sweep: its search, its best split, and the `plan` / `replay` budget commands."""

import json

import pytest

from uniradix.cli import main
from uniradix.plan import preset
from uniradix.plan.budget import Split
from uniradix.plan.sweep import (
    PlanPoint,
    _refinements,
    coarse_splits,
    knee,
    neighbours,
    replay_point,
    run_plan,
)
from uniradix.sim.replay import ReplayOptions

SMALL = ReplayOptions.of(workload="multi_turn", max_requests=60)


def test_coarse_grid_and_neighbours() -> None:
    two = coarse_splits(("full", "mamba"), 0.25)
    assert [s.as_dict()["mamba"] for s in two] == [0.25, 0.5, 0.75]
    three = coarse_splits(("full", "swa", "mamba"), 0.25)
    assert len(three) == 4 and Split.even(("full", "swa", "mamba")) in three
    around = neighbours(Split.of(("full", "mamba"), {"full": 0.875, "mamba": 0.125}), 0.125)
    assert [s.as_dict()["mamba"] for s in around] == [0.25]  # 0.0 would starve the pool


def test_a_split_that_wins_at_one_budget_is_tried_at_the_others() -> None:
    pools = ("full", "mamba")

    def point(b: int, mamba: float, hit: float) -> PlanPoint:
        return PlanPoint(b, {"full": 1 - mamba, "mamba": mamba}, hit, {}, 0.0)

    done = {
        (1, (0.5, 0.5)): point(1, 0.5, 0.3),
        (1, (0.375, 0.625)): point(1, 0.625, 0.35),  # found by refining at budget 1
        (2, (0.5, 0.5)): point(2, 0.5, 0.1),
        (2, (0.25, 0.75)): point(2, 0.75, 0.4),
    }
    todo = {(b, s.as_dict()["mamba"]) for b, s in _refinements(done, [1, 2], pools, 0.0625)}
    replayed = {(b, p.split["mamba"]) for (b, _), p in done.items()}
    # Each budget's neighbours at the step, and the other budget's best: 0.625 is new at 2.
    assert todo - replayed == {
        (1, 0.5625),
        (1, 0.6875),
        (1, 0.75),
        (2, 0.6875),
        (2, 0.8125),
        (2, 0.625),
    }


def test_knee() -> None:
    assert knee([1, 2, 4, 8], [0.1, 0.6, 0.7, 0.72]) == 2
    assert knee([1, 2], [0.1, 0.6]) is None
    assert knee([1, 2, 3], [0.5, 0.5, 0.5]) is None


def test_best_split_beats_every_point_tried() -> None:
    model = preset("jamba-v0.1")
    budgets = [6 * 10**8, 2 * 10**9]
    result = run_plan(SMALL, model, budgets, page_size=1, workers=2)
    assert len(result.points) <= len(budgets) * (3 + (2 + 1) * 3)
    for best in result.best:
        assert best.hit_rate is not None
        tried = [p for p in result.points if p.gpu_bytes == best.gpu_bytes]
        assert best in tried
        assert all(p.hit_rate is None or p.hit_rate <= best.hit_rate for p in tried)
    rates = {p.hit_rate for p in result.points if p.gpu_bytes == budgets[0]}
    assert len(rates) > 1  # the split matters at the small budget
    assert [e.split for e in result.even] == [{"full": 0.5, "mamba": 0.5}] * 2


def test_a_stalled_split_is_an_infeasible_point() -> None:
    # An SWA pool of 256 slots holds no prefill chunk: nothing is ever admitted. (A Mamba
    # request needs one slot to start, so a short Mamba split slows a run but does not stall it.)
    model = preset("gpt-oss-120b")
    stalled = Split.parse("full=0.9,swa=0.1", model.pools())
    point = replay_point(SMALL.updated(max_requests=5), model, 10**8, stalled, 16)
    assert point.hit_rate is None and "no progress" in (point.error or "")


def test_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "gpt-oss-120b", "--gpu-cache", "200MB", "--max-requests", "40"]
    assert main([*argv, "--json", "--workers", "2", "--refine-rounds", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["best"]) >= {"split", "hit_rate", "pools"}
    assert out["best"]["hit_rate"] == max(p["hit_rate"] for p in out["grid"])
    assert len(out["grid"]) == out["replays"] <= 3 + 2
    assert out["best"]["pools"]["swa"]["bytes_per_unit"] == 36864


def test_plan_with_an_explicit_split_and_a_config_file(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    from uniradix.plan import PRESET_CONFIGS

    config = tmp_path / "config.json"
    config.write_text(json.dumps(PRESET_CONFIGS["jamba-v0.1"]))
    argv = ["plan", "--model-config", str(config), "--gpu-cache", "1GB,2GB", "--json"]
    report = tmp_path / "report"
    assert (
        main(
            [
                *argv,
                "--split",
                "full=0.8,mamba=0.2",
                "--max-requests",
                "30",
                "--report",
                str(report),
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert [p["split"] for p in out["grid"]] == [{"full": 0.8, "mamba": 0.2}] * 2
    assert {p.name for p in report.iterdir()} == {"plan.json", "plan.md", "plan.png"}
    assert "| 2 GB | full 80.0%, mamba 20.0% |" in (report / "plan.md").read_text()


def test_replay_reports_bytes_per_pool(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", "--model", "jamba-v0.1", "--gpu-cache", "1GB", "--max-requests", "30"]
    assert main([*argv, "--split", "full=0.75,mamba=0.25", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    full, mamba = summary["components"]["full"], summary["components"]["mamba"]
    assert full["units"] == full["capacity"] == 750_000_000 // 16384
    assert mamba["units"] == mamba["capacity"] == 250_000_000 // 8716288
    assert mamba["bytes"] == mamba["units"] * 8716288
    assert summary["config"] == "mamba"


def test_replay_markdown_prints_bytes_and_units(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", "--model", "gemma-3-27b", "--gpu-cache", "4GB", "--max-requests", "20"]
    assert main([*argv, "--split", "full=0.3,swa=0.7"]) == 0
    out = capsys.readouterr().out
    assert "| swa | 70.0% | 2,799,992,832 | 6,573 tokens | 425,984 |" in out


def test_replay_split_auto_searches(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", "--model", "jamba-v0.1", "--gpu-cache", "600MB", "--max-requests", "30"]
    assert main([*argv, "--json", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "split auto:" in err and "replays, best full=" in err
    assert json.loads(out)["budget"]["split"]["mamba"] > 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["plan", "--model", "llama-3-8b", "--gpu-cache", "1XB"], "argument --gpu-cache"),
        (["plan", "--gpu-cache", "1GB"], "one of the arguments --model --model-config"),
        (["plan", "--model", "llama-3-8b", "--gpu-cache", "1GB", "--grid-step", "0"], "grid-step"),
        (["plan", "--model", "llama-3-8b", "--gpu-cache", "1GB", "--workers", "0"], "--workers"),
        (["replay", "--gpu-cache", "1GB"], "--gpu-cache needs --model"),
        (["replay", "--model", "jamba-v0.1", "--gpu-cache", "1MB"], "less than one"),
        (
            # An SWA pool of 256 slots holds no prefill chunk.
            ["replay", "--model", "gpt-oss-120b", "--gpu-cache", "100MB", "--page-size", "16"]
            + ["--split", "full=0.9,swa=0.1", "--max-requests", "5"],
            "too small for the requests to make progress",
        ),
    ],
)
def test_bad_plan_flags(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_replay_sizes_the_host_tier_from_a_host_budget(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", "--model", "llama-3-8b", "--gpu-cache", "1GB", "--page-size", "16"]
    assert main([*argv, "--host-cache", "4GB", "--max-requests", "20", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    # Llama-3-8B: 128 KiB of KV per token (32 layers x 8 heads x 128 x 2 x 2 bytes)
    per_page = 131072 * 16
    assert summary["components"]["host_full"]["capacity"] == 4_000_000_000 // per_page * 16
    assert main([*argv, "--host-cache", "4GB", "--host-tokens", "64"]) == 2
    assert "give one" in capsys.readouterr().err
    assert main(["replay", "--host-cache", "4GB"]) == 2
    assert "--host-cache needs --model" in capsys.readouterr().err
    assert main([*argv, "--host-cache", "1MB"]) == 2
    assert "hold no page" in capsys.readouterr().err


def test_plan_with_a_host_tier_loads_hits_back(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "llama-3-8b", "--gpu-cache", "100MB", "--max-requests", "40"]
    assert main([*argv, "--host-cache", "2GB", "--json", "--no-progress", "--workers", "1"]) == 0
    with_host = json.loads(capsys.readouterr().out)["best"]["hit_rate"]
    assert main([*argv, "--json", "--no-progress", "--workers", "1"]) == 0
    device_only = json.loads(capsys.readouterr().out)["best"]["hit_rate"]
    assert with_host > device_only
