"""`uniradix replay` with a host tier: flags, JSON fields, and hits a small device pool gets
back through the host."""

import functools
import json

import pytest

from uniradix.cli import main
from uniradix.sim.replay import ReplayOptions, run_replay

SMALL = dict(config="full", page_size=16, max_requests=100, check_invariants=True)


@functools.cache
def replay(**kwargs):
    return run_replay(ReplayOptions.of(**SMALL, **kwargs)).summary


@pytest.mark.parametrize("policy", ["write_through", "write_through_selective", "write_back"])
def test_a_host_tier_brings_back_hits_a_small_device_pool_lost(policy):
    small = replay(full_tokens=4000)
    big = replay(full_tokens=20000)
    tiered = replay(full_tokens=4000, host_tokens=16000, write_policy=policy)
    assert small["hit_tokens_by_tier"] == {"device": small["hit_tokens"], "host": 0}
    by_tier = tiered["hit_tokens_by_tier"]
    assert by_tier["device"] + by_tier["host"] == tiered["hit_tokens"]
    assert by_tier["host"] > 0 and tiered["hit_tokens"] > small["hit_tokens"]
    if policy != "write_through_selective":  # the selective policy skips first-time prefixes
        assert tiered["hit_tokens"] == big["hit_tokens"]
    stats = tiered["host_tier"]
    assert stats["write_policy"] == policy and stats["demoted_tokens"] > 0
    assert stats["h2d_bytes"] == stats["loaded_tokens"] * 2 * 2 * 4096 * 32
    host = tiered["components"]["host_full"]
    assert host["capacity"] == 16000 and 0 < host["peak_used"] <= 16000
    assert host["hit_tokens"] == by_tier["host"]
    assert tiered["leaked"] == {"full": 0, "host_full": 0, "req": 0}


def test_cli_flags_and_json(capsys):
    argv = ["replay", "--config", "full", "--page-size", "16", "--max-requests", "60"]
    argv += ["--full-tokens", "4000", "--hicache-ratio", "2", "--write-policy", "write_back"]
    assert main([*argv, "--json", "--check-invariants"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["components"]["host_full"]["capacity"] == 8000
    assert summary["host_tier"]["write_policy"] == "write_back"
    assert set(summary["hit_tokens_by_tier"]) == {"device", "host"}
    with pytest.raises(SystemExit):
        main([*argv, "--host-tokens", "100"])  # one size only
    with pytest.raises(SystemExit) as bad_size:
        main(["replay", "--config", "full", "--host-tokens", "0", "--max-requests", "5"])
    assert bad_size.value.code == 2
    assert "--host-tokens" in capsys.readouterr().err


def test_report_plots_hits_by_tier(tmp_path, capsys):
    argv = ["replay", "--config", "full", "--page-size", "16", "--max-requests", "60"]
    argv += ["--full-tokens", "3000", "--host-tokens", "12000", "--report", str(tmp_path)]
    assert main(argv) == 0
    assert (tmp_path / "hits_by_tier.png").stat().st_size > 0
    assert "hit tokens by tier" in (tmp_path / "summary.md").read_text()
    capsys.readouterr()
