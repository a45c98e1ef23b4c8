"""Multi-instance replay behind a router: every request served once, each instance's
invariants after every step, the event index equal to each cache's content at the end, and
cache-aware routing finding more hits than round-robin; the CLI publishes over ZMQ."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from tests.events.oracle import cached_hashes
from uniradix.cli import main
from uniradix.events.listen import listen
from uniradix.sim.cluster import Cluster
from uniradix.sim.replay import ReplayOptions

OPTIONS = ReplayOptions.of(
    workload="multi_turn",
    config="hybrid",
    page_size=4,
    full_tokens=16384,
    max_requests=60,
    check_invariants=True,
)


def test_routers_serve_everything_and_the_index_matches_the_caches() -> None:
    rates = {}
    for router in ("round-robin", "least-loaded", "cache-aware"):
        cluster = Cluster(OPTIONS, 3, router)
        summary = cluster.run()
        assert summary["router"] == router and summary["requests"] == 60
        counts = [i["requests"] for i in summary["instances"]]
        assert sum(counts) == 60 and summary["load_imbalance"] == max(counts) / 20
        assert summary["events_published"] > 0 and summary["events_dropped"] == 0
        assert summary["index"]["orphan_stores"] == 0
        for inst in cluster.instances:
            assert cluster.index.blocks(inst.name) == cached_hashes(inst.cache)
            assert inst.scheduler.num_invariant_checks == inst.scheduler.num_steps + 1
        rates[router] = summary["hit_rate"]
    assert rates["cache-aware"] > rates["round-robin"]


def test_one_instance_is_the_single_replay() -> None:
    from uniradix.sim.replay import run_replay

    single = run_replay(OPTIONS).summary
    cluster = Cluster(OPTIONS, 1, "least-loaded").run()
    assert cluster["hit_tokens"] == single["hit_tokens"] and cluster["load_imbalance"] == 1.0


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="instances"):
        Cluster(OPTIONS, 0, "round-robin")
    with pytest.raises(ValueError, match="router"):
        Cluster(OPTIONS, 2, "random")


def test_cli_json_keys(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", "--json", "--max-requests", "20", "--instances", "2"]
    assert main([*argv, "--router", "cache-aware", "--config", "full"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary) >= {
        "router",
        "instances",
        "load_imbalance",
        "events_published",
        "events_dropped",
    }
    assert len(summary["instances"]) == 2


def test_cli_publishes_while_replaying_and_events_listen_decodes() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"tcp://127.0.0.1:{port}"
    lines: list[str] = []
    listener = threading.Thread(
        target=listen, args=(endpoint, "kv@"), kwargs={"count": 3, "timeout_s": 20,
        "out": lines.append, "bind": True},
    )  # fmt: skip
    listener.start()
    argv = ["replay", "--max-requests", "40", "--config", "full", "--no-progress"]
    topic = ["--kv-events-topic", "kv@{pod}@{model}", "--kv-events-wire", "vllm-array"]
    assert main([*argv, "--kv-events", endpoint, *topic]) == 0
    listener.join(30)
    assert not listener.is_alive() and len(lines) == 3
    first = json.loads(lines[0])
    assert first["topic"] == "kv@instance-0@full" and first["dp_rank"] == 0
    assert all(
        e["type"] in ("BlockStored", "BlockRemoved", "AllBlocksCleared") for e in first["events"]
    )


def test_cli_vllm_block_hashes_route_like_sglang_ones(capsys: pytest.CaptureFixture[str]) -> None:
    """The cache-aware router reads the index, which hashes requests with the publishers'
    algorithm: vLLM's sha256_cbor finds exactly the prefixes SGLang's chain finds."""
    argv = ["replay", "--json", "--max-requests", "30", "--instances", "2", "--config", "full"]
    argv += ["--router", "cache-aware", "--kv-events", "tcp://127.0.0.1:9"]  # connects: no peer
    summaries = []
    for extra in (
        [],
        ["--kv-events-hash-algo", "vllm_sha256_cbor", "--kv-events-hash-seed", "0"],
        ["--kv-events-sender", "inline"],
        ["--kv-events-sender-wait-ms", "0"],
    ):
        assert main([*argv, *extra]) == 0
        summaries.append(json.loads(capsys.readouterr().out))
    assert summaries[0]["hit_rate"] > 0
    for s in summaries[1:]:
        assert s["hit_rate"] == summaries[0]["hit_rate"]
        assert s["instances"] == summaries[0]["instances"]
    assert main([*argv, "--kv-events-hash-algo", "vllm_sha256_cbor"]) != 0
    assert "needs hash_seed" in capsys.readouterr().err
    assert main([*argv, "--kv-events-sender-wait-ms", "1001"]) != 0
    assert "sender_wait_ms must be in [0, 1000.0], got 1001" in capsys.readouterr().err
