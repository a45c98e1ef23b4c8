"""The hit-rate suite's generators and converters: small, deterministic, and replayable."""

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.traces import aiperf_agentic, sharegpt
from benchmarks.traces.adversarial import ADVERSARIAL, branches, bursts
from benchmarks.traces.suite import JUDGE, TUNE, ideal_rate, suite
from benchmarks.traces.trace_io import CACHE_ENV, token_row, write_jsonl
from uniradix.sim.replay import load_specs
from uniradix.sim.traces import MOONCAKE_BLOCK_SIZE, load_token_lists

CHATS = [
    {"id": "a", "conversations": [
        {"from": "human", "value": "Hello there, how are you?"},
        {"from": "gpt", "value": "Fine, thanks."},
        {"from": "human", "value": "Tell me a story."},
        {"from": "gpt", "value": "Once upon a time."},
    ]},
    {"id": "b", "conversations": [
        {"from": "gpt", "value": "I start."},
        {"from": "human", "value": "What is 2 + 2?"},
        {"from": "gpt", "value": "4"},
    ]},
    {"id": "c", "conversations": [{"from": "human", "value": "cut off"}]},
]  # fmt: skip


def cut_off_json(tmp_path: Path) -> Path:
    """The package's file as it ships: a JSON array cut off inside its third element."""
    text = json.dumps(CHATS, indent=2)
    path = tmp_path / "sharegpt.json"
    path.write_text(text[: text.index('"cut off"') + 4])
    return path


def test_sharegpt_parses_a_cut_off_file_and_quotes_answers(tmp_path: Path) -> None:
    path = cut_off_json(tmp_path)
    assert [c[0]["value"] for c in sharegpt.conversations(path, 10)] == [
        "Hello there, how are you?",
        "I start.",
    ]
    rows = sharegpt.rows(path, seed=3, count=2)
    assert len(rows) == 3  # two turns of "a", one of "b" (its opening answer dropped)
    by_session: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_session.setdefault(row["session_id"], []).append(i)
    first, second = (rows[i] for i in next(v for v in by_session.values() if len(v) == 2))
    assert second["token_ids"][: len(first["token_ids"])] == first["token_ids"]
    quoted = second["token_ids"][len(first["token_ids"]) :][: len(first["output_ids"])]
    assert quoted == first["output_ids"] == sharegpt.token_ids("Fine, thanks.")
    assert second["after"] == rows.index(first)
    assert sharegpt.rows(path, seed=3, count=2) == rows


def test_token_ids_are_stable_per_word() -> None:
    assert sharegpt.token_ids("a b a!") == [
        *sharegpt.token_ids("a b a"),
        sharegpt.token_ids("!")[0],
    ]
    assert len(sharegpt.token_ids("Hello, world")) == 3


def test_aiperf_turns_are_concatenated_per_session() -> None:
    rows = [
        {"session_id": "s", "input_length": 700, "output_length": 5, "hash_ids": [1, 2],
         "timestamp": 10.0},
        {"session_id": "t", "input_length": 100, "output_length": 3, "hash_ids": [9],
         "timestamp": 12.0},
        {"session_id": "s", "input_length": 300, "output_length": 4, "hash_ids": [3],
         "delay": 5.0},
    ]  # fmt: skip
    out = aiperf_agentic.convert(rows)
    assert [r["session_id"] for r in out] == ["s", "t", "s"]
    assert out[2]["hash_ids"] == [1, 2, 3]
    assert out[2]["input_length"] == 2 * MOONCAKE_BLOCK_SIZE + 300
    assert out[2]["timestamp"] == 15.0
    with pytest.raises(ValueError, match="aiperf row 0"):
        aiperf_agentic.convert([{"session_id": "s"}])


def test_token_rows_carry_outputs_and_after(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl", [token_row([1, 2, 3], [7, 8]), token_row([1, 2, 3, 7, 9], [5], 0)]
    )
    specs = load_token_lists(path)
    assert specs[0].output_ids.tolist() == [7, 8]
    assert specs[1].after == 0
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"token_ids": [1], "after": 0}])
    with pytest.raises(ValueError, match="after must be an earlier row"):
        load_token_lists(bad)


def test_adversarial_generators_are_seeded_and_share_as_described() -> None:
    for make in ADVERSARIAL.values():
        a, b = make(seed=1), make(seed=1)
        assert [s.prompt.token_ids().tolist() for s in a[:5]] == [
            s.prompt.token_ids().tolist() for s in b[:5]
        ]
    tree = branches(seed=0, prefix_len=256, count=4, revisits=1)
    prefix = tree[0].prompt.token_ids()[:256]
    assert all(np.array_equal(s.prompt.token_ids()[:256], prefix) for s in tree)
    burst = bursts(seed=0, conversations=2, turns=2, burst=3)
    assert [s.session_id is None for s in burst] == [False, False, True, True, True, False, False]


def test_suite_halves_and_ideal_rates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(aiperf_agentic, "find_aiperf", lambda: None)
    log: list[str] = []
    traces = suite((0, 1), None, cut_off_json(tmp_path), ("multi_turn",), log)
    halves = {t.name: t.half for t in traces}
    assert halves["multi_turn/s0"] == TUNE and halves["multi_turn/s1"] == JUDGE
    assert halves["sharegpt/s1"] == JUDGE and halves["branches/s0"] == TUNE
    assert any("aiperf" in line for line in log) and any("mooncake" in line for line in log)
    chat = next(t for t in traces if t.name == "sharegpt/s1")
    assert len(load_specs(chat.options)) == 3
    assert 0.9 < ideal_rate(next(t for t in traces if t.name == "branches/s1").options) < 1
