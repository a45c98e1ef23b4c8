"""Decode steps run in bulk give the replay exactly what one step at a time gives."""

import pytest

import uniradix.sim.scheduler as scheduler_module
from benchmarks.replay_diff import without_timings
from uniradix.sim.replay import ReplayOptions, run_replay


def _replay(options: ReplayOptions, monkeypatch: pytest.MonkeyPatch, bulk: bool):  # type: ignore[no-untyped-def]
    steps: list[int] = []
    real = scheduler_module.decode_in_bulk

    def counting(running, runner, slots, num_steps, on_step):  # type: ignore[no-untyped-def]
        steps.append(num_steps)
        real(running, runner, slots, num_steps, on_step)

    monkeypatch.setattr(scheduler_module, "decode_in_bulk", counting)
    if not bulk:
        monkeypatch.setattr(scheduler_module, "bulk_allowed", lambda *args: False)
    result = run_replay(options)
    monkeypatch.undo()
    return result, steps


@pytest.mark.parametrize(
    ("workload", "config", "page_size", "full_tokens"),
    [
        ("multi_turn", "full", 1, 8192),
        ("agentic", "full", 16, 6000),  # a small pool: evictions and retractions between runs
        ("multi_turn", "mamba", 1, 8192),
        ("shared_prefix", "swa", 16, 8192),  # windowed: never in bulk
    ],
)
def test_bulk_decode_changes_no_figure(monkeypatch, workload, config, page_size, full_tokens):
    options = ReplayOptions.of(
        workload=workload,
        config=config,
        page_size=page_size,
        full_tokens=full_tokens,
        mamba_slots=64 if config == "mamba" else None,
        max_requests=40,
    )
    bulk, bulk_steps = _replay(options, monkeypatch, bulk=True)
    single, single_steps = _replay(options, monkeypatch, bulk=False)
    assert not single_steps
    assert (sum(bulk_steps) > 0) == (config != "swa")
    assert without_timings(bulk.summary) == without_timings(single.summary)
    assert bulk.timeline == single.timeline and bulk.hit_lengths == single.hit_lengths
