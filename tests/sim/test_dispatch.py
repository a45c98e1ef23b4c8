"""Late binding (`Cluster(dispatch="late")`) and the turn gate (`await_turns`): a request is
routed only to an instance with a free running slot; a next turn waits for its previous
turn's prefill and then finds all of it cached; the CLI takes both options."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.sim.test_cluster import OPTIONS as CLUSTER_OPTIONS
from uniradix.cli import main
from uniradix.sim.cluster import Cluster
from uniradix.sim.replay import ReplayOptions
from uniradix.sim.request_spec import RequestSpec
from uniradix.sim.scheduler import Scheduler
from uniradix.sim.turn_gate import TurnGate

OPTIONS = CLUSTER_OPTIONS.updated(max_running=4)
_SUBMIT = Scheduler.submit


def _at_submit(monkeypatch: pytest.MonkeyPatch, cluster: Cluster) -> list[tuple[int, int]]:
    """Runs `cluster`; returns, per request routed, its instance's outstanding and running
    requests before it."""
    seen: list[tuple[int, int]] = []

    def counted(scheduler: Scheduler, spec: RequestSpec) -> None:
        inst = next(i for i in cluster.instances if i.scheduler is scheduler)
        seen.append((inst.outstanding, len(scheduler.running)))
        _SUBMIT(scheduler, spec)

    monkeypatch.setattr(Scheduler, "submit", counted)
    cluster.run()
    return seen


def test_late_binding_routes_only_to_an_instance_that_admits_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    late = _at_submit(monkeypatch, Cluster(OPTIONS, 3, "cache-aware", dispatch="late"))
    early = _at_submit(monkeypatch, Cluster(OPTIONS, 3, "cache-aware", dispatch="early"))
    assert len(late) == len(early) == 60
    # Late: a free running slot and nothing waiting there; early: requests queue.
    assert all(o == r < OPTIONS.scheduler.max_running for o, r in late)
    assert max(o for o, _ in early) >= OPTIONS.scheduler.max_running


def test_late_binding_keeps_a_next_turn_for_the_instance_holding_its_context(
    tmp_path: Path,
) -> None:
    """Two conversations, A answering long and B short, on two instances of one running
    slot: when B's instance frees first, A's next turn (the older request) waits for A's
    instance and B's next turn goes ahead of it."""
    rows = []
    for turn in (1, 2):
        for first, output in ((0, 64), (100, 2)):
            ids = list(range(first, first + 2 * turn))
            rows.append({"timestamp": len(rows), "input_length": 512 * len(ids),
                         "output_length": output, "hash_ids": ids})  # fmt: skip
    trace = tmp_path / "two.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    options = ReplayOptions.of(
        trace=str(trace), config="full", page_size=16, full_tokens=64_000, max_running=1
    )
    cluster = Cluster(options, 2, "cache-aware", dispatch="late")
    cluster.run()
    b_instance = next(inst for inst in cluster.instances if 1 in inst.global_rids)
    assert b_instance.global_rids[:2] == [1, 3]


def test_turn_gate_holds_a_prompt_holding_one_in_prefill() -> None:
    gate = TurnGate(2)
    gate.routed(0, 7, [1, 2, 3])
    assert not gate.hold(100, [1, 2])  # a prefix of it: nothing to wait for
    assert not gate.hold(101, [1, 5, 6])  # a branch
    assert gate.hold(102, [1, 2, 3, 4]) and gate.hold(103, [1, 2, 3])
    assert gate.holding == 2 and gate.pending(0) == {7: 3}
    assert gate.prefilled(1, 7) == []  # another instance's rid 7: none routed
    assert gate.prefilled(0, 7) == [102, 103] and gate.holding == 0
    assert gate.prefilled(0, 7) == []
    gate.routed(0, 1, [9])
    gate.routed(1, 1, [9])  # the same prompt twice: held until both are prefilled
    assert gate.hold(104, [9, 10])
    assert gate.prefilled(0, 1) == [] and gate.prefilled(1, 1) == [104]


def _two_turns(tmp_path: Path) -> Path:
    """A 12-block prompt (three 4,096-token chunks) and its next turn, one block longer,
    arriving together."""
    rows = [
        {"timestamp": 0, "input_length": 12 * 512, "output_length": 8, "hash_ids": list(range(12))},
        {"timestamp": 1, "input_length": 13 * 512, "output_length": 8, "hash_ids": list(range(13))},
    ]
    trace = tmp_path / "turns.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return trace


@pytest.mark.parametrize("config", ["full", "swa", "mamba", "hybrid"])
def test_a_next_turn_waits_for_its_previous_prefill(tmp_path: Path, config: str) -> None:
    options = ReplayOptions.of(
        trace=str(_two_turns(tmp_path)),
        config=config,
        page_size=16,
        full_tokens=64_000,
        sliding_window=1024,
        check_invariants=True,
    )
    early = Cluster(options, 2, "cache-aware", dispatch="early").run()
    held = Cluster(options, 2, "cache-aware", dispatch="early", await_turns=True).run()
    # Held, the next turn finds the whole first prompt, as the router predicted.
    assert held["hit_tokens"] == 12 * 512
    assert held["predicted_hit_tokens"] == held["at_match_hit_tokens"] == held["hit_tokens"]
    if config in ("mamba", "hybrid"):
        # Routed at once, it is admitted before the first prompt's Mamba state at its end
        # is cached, and resumes a page short.
        assert early["hit_tokens"] == 12 * 512 - 16 < early["predicted_hit_tokens"]


def test_cli_options_and_bad_dispatch(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="'soon'"):
        Cluster(OPTIONS, 2, "cache-aware", dispatch="soon")
    argv = ["replay", "--workload", "multi_turn", "--config", "hybrid", "--max-requests", "20"]
    argv += ["--instances", "2", "--router", "cache-aware", "--json", "--no-progress"]
    assert main([*argv, "--dispatch", "late", "--await-turns"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 20
    assert main([*argv, "--dispatch", "early", "--no-await-turns"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["dispatch"], summary["await_turns"]) == ("early", False)
    assert main(argv) == 0  # the default for cache-aware over two instances
    summary = json.loads(capsys.readouterr().out)
    assert (summary["dispatch"], summary["await_turns"]) == ("late", True)
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--dispatch", "soon"])
    assert exc.value.code == 2


def test_late_binding_and_awaited_turns_are_the_default_for_cache_aware_only() -> None:
    chosen = {
        (n, router): (c.dispatch, c.gate is not None)
        for n, router in ((2, "cache-aware"), (1, "cache-aware"), (2, "round-robin"))
        for c in [Cluster(OPTIONS, n, router)]
    }
    assert chosen == {
        (2, "cache-aware"): ("late", True),
        (1, "cache-aware"): ("early", False),  # one instance stays the single replay
        (2, "round-robin"): ("early", False),  # it never reads the index late binding waits on
    }
    late_alone = Cluster(OPTIONS, 2, "cache-aware", dispatch="late", await_turns=False)
    assert (late_alone.dispatch, late_alone.gate) == ("late", None)


@pytest.mark.parametrize("config", ["swa", "mamba", "hybrid"])
def test_by_default_the_router_predicts_what_the_instance_matches(config: str) -> None:
    """Routed only where the dry admission check passes, a request is matched at the next
    step, before that instance's own allocations evict anything; and a prompt in flight is
    counted only until its first token. So the prediction is the index's, and the hits."""
    summary = Cluster(replace(OPTIONS, config=config), 3, "cache-aware").run()
    assert summary["hit_tokens"] > 0
    assert summary["predicted_hit_tokens"] == summary["at_match_hit_tokens"]
    assert summary["at_match_hit_tokens"] == summary["hit_tokens"]
