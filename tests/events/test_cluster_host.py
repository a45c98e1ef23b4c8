"""Multi-instance replay with a host tier on every instance: the event index, built only
from the published events, equals each cache's content on the device and on the host."""

from __future__ import annotations

import json

import pytest

from tests.events.oracle import cached_hashes
from uniradix.cli import main
from uniradix.sim.cluster import Cluster
from uniradix.sim.replay import ReplayOptions


@pytest.mark.parametrize("write_policy", ["write_through", "write_back"])
def test_cache_aware_cluster_with_host_tiers_keeps_the_index_exact(write_policy: str) -> None:
    options = ReplayOptions.of(
        workload="multi_turn",
        config="full",
        page_size=4,
        full_tokens=2048,  # small device: demotion, load-back and host eviction all happen
        host_tokens=4096,
        write_policy=write_policy,
        max_requests=60,
        check_invariants=True,
    )
    cluster = Cluster(options, 2, "cache-aware")
    summary = cluster.run()
    assert summary["requests"] == 60 and summary["index"]["orphan_stores"] == 0
    host_blocks = demoted = 0
    for inst in cluster.instances:
        inst.stream.flush()
        assert cluster.index.blocks(inst.name) == cached_hashes(inst.cache)
        host = cached_hashes(inst.cache, "CPU_PINNED")
        assert cluster.index.blocks(inst.name, "CPU_PINNED") == host
        host_blocks += len(host)
        demoted += inst.cache.host_tier.stats.demoted_tokens
    assert host_blocks > 0 and demoted > 0


def test_cli_replay_with_instances_and_host_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", "--json", "--max-requests", "20", "--instances", "2", "--config", "full"]
    assert main([*argv, "--host-tokens", "4096", "--router", "cache-aware"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["router"] == "cache-aware" and summary["requests"] == 20
    assert summary["events_published"] > 0 and summary["index"]["orphan_stores"] == 0
