import json
from pathlib import Path

import numpy as np
import pytest

from uniradix.sim.request_spec import BlockPrompt
from uniradix.sim.traces import load_mooncake, load_token_lists, load_trace

# The checkout sits next to shared/ (so does CI's fresh clone).
REFERENCE = Path(__file__).resolve().parents[3] / "shared/reference/mooncake_synthetic_trace.jsonl"


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_block_prompt_maps_blocks_to_tokens() -> None:
    prompt = BlockPrompt((7, 9), num_tokens=6, block_size=4)
    assert prompt.token_ids().tolist() == [28, 29, 30, 31, 36, 37]
    assert len(prompt) == 6


@pytest.mark.parametrize("num_tokens", [4, 9])
def test_block_prompt_rejects_inconsistent_length(num_tokens: int) -> None:
    with pytest.raises(ValueError, match=f"input_length={num_tokens}"):
        BlockPrompt((1, 2), num_tokens=num_tokens, block_size=4)


def test_mooncake_equal_hash_ids_give_equal_blocks(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.jsonl",
        [
            {"timestamp": 5, "input_length": 700, "output_length": 2, "hash_ids": [0, 1]},
            {"timestamp": 1, "input_length": 1024, "output_length": 3, "hash_ids": [0, 2]},
        ],
    )
    specs = load_mooncake(path, seed=1)
    assert [s.output_len for s in specs] == [3, 2]  # sorted by timestamp
    assert [s.arrival_ms for s in specs] == [1.0, 5.0]
    a, b = (s.prompt.token_ids() for s in specs)
    assert len(a) == 1024 and len(b) == 700
    assert np.array_equal(a[:512], b[:512])
    assert a[512:].tolist() == list(range(1024, 1536))
    assert b[512:].tolist() == list(range(512, 700))
    again = load_mooncake(path, seed=1)
    assert np.array_equal(again[0].output_ids, specs[0].output_ids)


@pytest.mark.parametrize(
    "row, message",
    [
        ({"input_length": 10, "output_length": 1, "hash_ids": []}, "cannot hold"),
        ({"input_length": 10, "output_length": 0, "hash_ids": [1]}, "output_length"),
        ({"input_length": 10, "output_length": 1, "hash_ids": ["a"]}, "hash_ids"),
        ({"input_length": 600, "output_length": 1, "hash_ids": [1]}, "cannot hold"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_mooncake_bad_rows_name_the_line(tmp_path: Path, row: object, message: str) -> None:
    path = _write(tmp_path / "t.jsonl", [row])
    with pytest.raises(ValueError, match=message) as info:
        load_mooncake(path)
    assert "t.jsonl:1" in str(info.value)


def test_token_lists(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [[1, 2, 3], {"token_ids": [1, 2, 4], "output_length": 5}])
    specs = load_trace(path, "tokens", seed=0)
    assert [s.prompt.token_ids().tolist() for s in specs] == [[1, 2, 3], [1, 2, 4]]
    assert [s.output_len for s in specs] == [16, 5]
    assert len(load_token_lists(path, max_requests=1)) == 1
    bad = _write(tmp_path / "bad.jsonl", [[1, -2]])
    with pytest.raises(ValueError, match=r"bad\.jsonl:1"):
        load_token_lists(bad)
    with pytest.raises(ValueError, match="trace format"):
        load_trace(path, "csv")


@pytest.mark.skipif(not REFERENCE.exists(), reason="reference trace not present")
def test_reference_trace_loads() -> None:
    specs = load_mooncake(REFERENCE, max_requests=20)
    assert len(specs) == 20
    assert len(specs[0].prompt) == 40160 and specs[0].output_len == 6
