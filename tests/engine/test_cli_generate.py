"""`uniradix generate`: generated and file prompts, the JSON summary, exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from uniradix.cli import main
from uniradix.engine import run
from uniradix.engine.engine import Verification
from uniradix.engine.run import generated_prompts, load_prompts

REQUIRED = {
    "prompts",
    "generated_tokens",
    "hit_tokens",
    "evicted_tokens",
    "mismatches",
    "max_abs_logit_diff",
    "leaked",
    "wall_s",
}
SMALL = ["--num-prompts", "4", "--prompt-len", "20", "--shared-prefix-len", "8"]


@pytest.mark.parametrize("config", ["full", "swa", "mamba", "hybrid"])
def test_json_verify_prints_one_object(
    config: str, capsys: pytest.CaptureFixture[str], device: str
) -> None:
    argv = ["generate", "--config", config, "--verify", "--json", "--device", device, *SMALL]
    argv += ["--page-size", "4", "--chunk-size", "8", "--max-new-tokens", "5"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert set(summary) >= REQUIRED
    assert len(summary["prompts"]) == 4 and summary["prompts"][0][:8] == summary["prompts"][3][:8]
    assert [len(t) for t in summary["generated_tokens"]] == [5] * 4
    assert summary["hit_tokens"] > 0
    assert summary["mismatches"] == 0 and summary["max_abs_logit_diff"] < 1e-6
    assert set(summary["leaked"].values()) == {0}
    assert err == ""


def test_prompts_from_a_file_and_the_text_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text("[1, 2, 3, 4, 5]\n\n[1, 2, 3, 9]\n")
    argv = ["generate", "--config", "swa", "--prompts", str(path), "--max-new-tokens", "3"]
    argv += ["--max-running", "1"]  # the second prompt comes after the first is cached
    assert main([*argv, "--verify"]) == 0
    out, _ = capsys.readouterr()
    assert "hit tokens: 3 of 9" in out
    assert "verify: 0 mismatched prompts" in out
    assert out.count("\n  ") == 2


def test_a_mismatch_or_a_leak_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def wrong(*args: object) -> Verification:
        return Verification([[0]], [1], 3.0)

    monkeypatch.setattr(run, "verify", wrong)
    assert main(["generate", "--verify", "--json", *SMALL]) == 1
    assert "prompts [1] differ" in capsys.readouterr().err

    real_run = run.run_generate

    def leaking(options: run.GenerateOptions) -> dict[str, object]:
        summary = real_run(options)
        summary["leaked"] = {"full": 2}
        return summary

    monkeypatch.setattr(run, "run_generate", leaking)
    assert main(["generate", *SMALL]) == 1
    assert "leaked slots per pool: {'full': 2}" in capsys.readouterr().err


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--prompts", str(tmp_path / "missing.jsonl")]) == 2
    assert main(["generate", "--config", "full", "--swa-tokens", "64"]) == 2
    assert main(["generate", "--prompt-len", "4", "--shared-prefix-len", "4"]) == 2
    err = capsys.readouterr().err
    assert "no SWA layer" in err and "shared_prefix_len" in err


def test_generated_prompts_share_prefixes_at_two_depths() -> None:
    prompts = generated_prompts(5, 12, 4, 512, seed=1)
    assert [len(p) for p in prompts] == [12] * 5
    assert all(p[:4] == prompts[0][:4] for p in prompts)
    assert prompts[1][:8] == prompts[0][:8] and prompts[1] != prompts[0]
    assert prompts[3][:8] == prompts[2][:8] and prompts[2][4:8] != prompts[0][4:8]
    assert generated_prompts(5, 12, 4, 512, seed=1) == prompts


def test_load_prompts_rejects_what_is_not_a_list_of_ids(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    for bad in ('{"ids": [1]}', "[1, 2.5]", "[true]"):
        path.write_text(f"[1]\n{bad}\n")
        with pytest.raises(ValueError, match=":2: expected a JSON list"):
            load_prompts(str(path))
    path.write_text("\n")
    with pytest.raises(ValueError, match="no prompts"):
        load_prompts(str(path))


def test_generate_with_a_host_tier_verifies(capsys) -> None:  # type: ignore[no-untyped-def]
    import json

    from uniradix.cli import main

    argv = ["generate", "--config", "full", "--full-tokens", "48", "--host-tokens", "128"]
    argv += ["--num-prompts", "6", "--max-new-tokens", "3", "--host-engine", "thread"]
    assert main([*argv, "--page-size", "4", "--verify", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["mismatches"] == 0 and "host_hit_tokens" in summary
