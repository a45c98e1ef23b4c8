"""Real Redis servers for the storage tests: a standalone server and a 3-node cluster, each on
free loopback ports, without persistence, stopped at the end of the session. No fake Redis:
the tests need `redis-server` and `redis-cli` (scripts/setup.sh installs them)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import redis_servers
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


def start_cluster(root: Path, replicas: int = 0) -> list[RedisServer]:
    """Three masters (`replicas` each). Each node keeps its cluster config in its own folder,
    so a node stopped and started again rejoins with its slots (its data is gone)."""
    return redis_servers.start_cluster(root, RedisServer, replicas=replicas)


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
    # These tests check what is stored, not latency: the default 0.5 s call deadline is a
    # serving budget that a loaded 2-core test machine can pass (a first Cluster call maps
    # the slots of three masters); tests/storage/test_redis_deadline.py tests the deadline.
    url += "?timeout_s=10"
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
