"""Real Redis servers for the storage tests: a standalone server and a 3-node cluster, each on
free loopback ports, without persistence, stopped at the end of the session. No fake Redis:
the tests need `redis-server` and `redis-cli` (scripts/setup.sh installs them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from benchmarks.redis_servers import RedisProcess
from uniradix.storage import open_backend


class RedisServer(RedisProcess):
    """One `redis-server` process (`benchmarks.redis_servers`); `stop()` kills it and
    `start()` brings it back on the same port (empty: no persistence). Skips the test when
    redis-server is missing."""

    @property  # type: ignore[override]
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server missing: scripts/setup.sh installs it")
        super().start()
        return self


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of the test's own, which it may kill and restart."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


def wait_cluster_ok(nodes: list[RedisServer], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            info = [n.client().execute_command("CLUSTER INFO") for n in nodes]
            if all(i.get("cluster_state") == "ok" for i in info):
                return
        except redis.exceptions.ConnectionError:
            info = []
        if time.monotonic() > deadline:
            raise RuntimeError(f"cluster not ready: {info}")
        time.sleep(0.025)


def start_cluster(root: Path) -> list[RedisServer]:
    """Three masters, no replicas. Each node keeps its cluster config in its own folder, so
    a node stopped and started again rejoins with its slots (its data is gone)."""
    nodes = [
        RedisServer(root / str(i), "--cluster-enabled", "yes", "--cluster-node-timeout", "2000")
        for i in range(3)
    ]
    for node in nodes:
        node.start()
    try:
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=30,
        )  # fmt: skip
        wait_cluster_ok(nodes)
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return nodes


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisServer]]:
    nodes = start_cluster(tmp_path_factory.mktemp("cluster"))
    yield nodes
    for node in nodes:
        node.stop()


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[list[RedisServer]]:
    """A cluster of the test's own, whose nodes it may kill and restart."""
    nodes = start_cluster(tmp_path / "cluster")
    yield nodes
    for node in nodes:
        node.stop()


@pytest.fixture(params=["file", "redis", "redis+cluster"])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL per backend, on an empty store."""
    if request.param == "file":
        yield f"file://{tmp_path / 'l3'}"
        return
    if request.param == "redis":
        url = request.getfixturevalue("redis_server").url
    else:
        nodes = request.getfixturevalue("redis_cluster")
        url = f"redis+cluster://127.0.0.1:{nodes[0].port}"
    store = open_backend(url)
    assert store.clear()
    store.close()
    yield url


def du(directory: Path) -> int:
    """Allocated blocks of the directory and everything under it, as `du` counts them."""
    total = directory.lstat().st_blocks * 512
    for root, dirs, files in os.walk(directory):
        total += sum((Path(root) / e).lstat().st_blocks * 512 for e in dirs + files)
    return total
