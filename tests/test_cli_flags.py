"""Every numeric flag is checked up front: one line naming the flag, exit status 2."""

import argparse
import json
from pathlib import Path

import pytest

from uniradix.cli import main
from uniradix.cli_flags import byte_size
from uniradix.sim.traces import load_mooncake


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["replay", "--page-size", "0"], "--page-size"),
        (["replay", "--full-tokens", "-5"], "--full-tokens"),
        (["replay", "--sliding-window", "0"], "--sliding-window"),
        (["replay", "--swa-tokens", "0"], "--swa-tokens"),
        (["replay", "--mamba-slots", "-1"], "--mamba-slots"),
        (["replay", "--max-running", "0"], "--max-running"),
        (["replay", "--chunk-size", "0"], "--chunk-size"),
        (["replay", "--max-requests", "0"], "--max-requests"),
        (["replay", "--seed", "-1"], "--seed"),
        (["replay", "--hidden-size", "0"], "--hidden-size"),
        (["replay", "--full-layers", "-1"], "--full-layers"),
        (["replay", "--decode-reserve-ratio", "1.5"], "--decode-reserve-ratio"),
        (["replay", "--decode-reserve-ratio", "nan"], "--decode-reserve-ratio"),
        (["replay", "--page-size", "four"], "--page-size"),
        (["generate", "--page-size", "0"], "--page-size"),
        (["generate", "--max-new-tokens", "0"], "--max-new-tokens"),
        (["generate", "--prompt-len", "-3"], "--prompt-len"),
        (["generate", "--shared-prefix-len", "-1"], "--shared-prefix-len"),
        (["generate", "--sliding-window", "0"], "--sliding-window"),
        (["generate", "--full-tokens", "0"], "--full-tokens"),
    ],
)
def test_bad_numeric_flag_is_one_line_naming_it(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and f"argument {flag}:" in err
    assert err.startswith(f"uniradix {argv[0]}: error:")


@pytest.mark.parametrize("command", ["replay", "generate"])
def test_pools_too_big_for_memory_are_one_line(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--full-tokens", str(10**15)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"uniradix {command}: error: the pools do not fit") and err.count("\n") == 1
    )


def test_zero_is_allowed_where_it_means_none(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", "--config", "full", "--max-requests", "5", "--json", "--seed", "0"]
    assert main([*argv, "--swa-layers", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 5


@pytest.mark.parametrize(
    "text, num_bytes",
    [("40GB", 40 * 10**9), ("24GiB", 24 * 2**30), ("1.5gib", 3 * 2**29), ("4096", 4096)],
)
def test_byte_sizes(text: str, num_bytes: int) -> None:
    assert byte_size(text) == num_bytes


@pytest.mark.parametrize("text", ["", "GB", "40XB", "-1GB", "0", "0.1B"])
def test_bad_byte_sizes(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"size|byte"):
        byte_size(text)


def _huge_trace(tmp_path: Path) -> Path:
    rows = [
        {"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [0, 1]},
        {"timestamp": 1, "input_length": 600, "output_length": 10**11, "hash_ids": [0, 2]},
        {"timestamp": 2, "input_length": 700, "output_length": 4, "hash_ids": [0, 1]},
    ]
    path = tmp_path / "huge.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_huge_output_length_is_capped_before_allocation(tmp_path: Path) -> None:
    specs = load_mooncake(_huge_trace(tmp_path), max_sequence_len=4096)
    assert [s.output_len for s in specs] == [4, 4096 + 1 - 600, 4]
    assert [s.source_line for s in specs] == [1, 2, 3]


def test_replay_rejects_a_huge_row_with_its_line_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["replay", "--trace", str(_huge_trace(tmp_path)), "--config", "full", "--json"]
    assert main([*argv, "--full-tokens", "4096", "--max-running", "1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"] == 2 and summary["rejected"] == 1
    assert summary["rejected_lines"] == [2]
    assert summary["hit_tokens"] == 600  # line 3 extends line 1's prompt


def test_ratio_and_duration_flags_take_any_positive_number() -> None:
    from uniradix.cli_flags import positive_float

    assert positive_float("4") == 4.0
    for bad in ("0", "-1", "nan", "inf", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_float(bad)
