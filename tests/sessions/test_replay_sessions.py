"""Sessions in the replay: workloads and traces carry session ids, `--sessions` turns the
session cache on, and the summary splits follow-up turns from the other requests."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from uniradix.cli import main
from uniradix.sim.ideal import ideal_hits
from uniradix.sim.replay import ReplayOptions, run_replay
from uniradix.sim.sessions import followup_rids
from uniradix.sim.traces import load_mooncake, load_token_lists
from uniradix.sim.workloads import WORKLOADS, agentic, generate_workload, multi_turn


def test_multi_turn_and_agentic_turns_carry_their_session() -> None:
    chats = multi_turn(conversations=3, turns=2)
    assert [s.session_id for s in chats] == ["chat0", "chat1", "chat2"] * 2
    assert followup_rids(chats) == {3, 4, 5}
    agents = agentic(agents=2, steps=2, one_off_per_step=1)
    sids = [s.session_id for s in agents]
    assert {"agent0", "agent1", None} == set(sids)
    # the one-off prompts have no session and the agent's next step waits for its burst
    for spec in agents:
        if spec.session_id is None:
            assert agents[spec.after].session_id is not None  # type: ignore[index]


def test_default_agentic_is_unchanged_by_the_interference_options() -> None:
    plain, zero = agentic(), agentic(one_off_per_step=0)
    assert [len(s.prompt) for s in plain] == [len(s.prompt) for s in zero]
    # steps and retries continue their agent's session; a branch (a dead end) does not
    for spec in plain:
        if spec.session_id is None:
            parent = plain[spec.after] if spec.after is not None else None
            assert parent is None or len(spec.prompt) > len(parent.prompt)
    assert sum(s.session_id is None for s in plain) < len(plain) // 4


def test_trace_rows_with_session_or_chat_id_use_it(tmp_path: Path) -> None:
    mooncake = tmp_path / "m.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1], "chat_id": 7},
        {"timestamp": 1, "input_length": 4, "output_length": 1, "hash_ids": [1], "session_id": "a"},
        {"timestamp": 2, "input_length": 4, "output_length": 1, "hash_ids": [2]},
    ]
    mooncake.write_text("\n".join(json.dumps(r) for r in rows))
    assert [s.session_id for s in load_mooncake(mooncake, block_size=4)] == ["7", "a", None]
    tokens = tmp_path / "t.jsonl"
    tokens.write_text('{"token_ids": [1, 2], "session_id": "x"}\n[3, 4]\n')
    assert [s.session_id for s in load_token_lists(tokens)] == ["x", None]
    tokens.write_text('{"token_ids": [1, 2], "session_id": [1]}\n')
    with pytest.raises(ValueError, match="session_id"):
        load_token_lists(tokens)


def test_replay_with_sessions_reports_followups_and_session_counts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["replay", "--workload", "multi_turn", "--config", "hybrid", "--max-requests", "48"]
    assert main([*argv, "--sessions", "--json", "--check-invariants", "--full-tokens", "6144"]) == 0
    summary = json.loads(capsys.readouterr().out)
    sessions = summary["sessions"]
    assert sessions["enabled"] and sessions["opened"] == 24
    assert sessions["released"] == 24  # each conversation's last turn finished
    assert set(sessions) >= {"opened", "released", "evicted_while_covered"}
    assert 0 < summary["session_followup_hit_rate"] <= summary["session_followup_ideal_hit_rate"]
    assert summary["leaked"] == {"full": 0, "swa": 0, "mamba": 0, "req": 0}


def test_session_cache_keeps_followup_hits_under_interference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A small copy of the benchmark's figure: a pool a quarter of the working set, bursts of
    one-off traffic between turns; sessions keep more follow-up hits and cost the one-off
    traffic nothing it would have hit."""
    sizes = {"agents": 4, "steps": 3, "one_off_per_step": 8, "one_off_len": 512}
    monkeypatch.setitem(WORKLOADS, "small", functools.partial(agentic, **sizes))
    specs = generate_workload("small")
    working_set = sum(len(s.prompt) + s.output_len for s in specs) - sum(ideal_hits(specs, 1))
    results = {}
    for sessions in (False, True):
        options = ReplayOptions.of(
            workload="small", config="full", full_tokens=working_set // 4, sessions=sessions
        )
        results[sessions] = run_replay(options).summary
    on, off = results[True], results[False]
    assert on["session_followup_hit_rate"] > off["session_followup_hit_rate"]
    assert on["other_hit_rate"] >= off["other_hit_rate"] - 0.01
    assert on["sessions"]["opened"] == 4 and off["sessions"]["opened"] == 0
    assert on["sessions"]["released"] == 4
