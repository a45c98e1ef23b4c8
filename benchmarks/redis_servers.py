"""Local `redis-server` processes for benchmarks: a free loopback port, no persistence, any
extra server flags (`--requirepass`, `--maxmemory`), stop and restart on the same port; and
local Redis Clusters of such processes (`start_cluster`, with replicas or without)."""

from __future__ import annotations

import random
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import redis


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A free port whose cluster-bus port (port + 10000) is free too."""
    for _ in range(1000):
        port = random.randrange(20000, 30000)
        if _is_free(port) and _is_free(port + 10000):
            return port
    raise RuntimeError("no free loopback port pair")


class RedisProcess:
    def __init__(self, workdir: Path, *flags: str, password: str | None = None) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.flags = list(flags) + (["--requirepass", password] if password else [])
        self.password = password
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    def url(self, password: str | None = None) -> str:
        auth = f":{password}@" if password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> RedisProcess:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir), *self.flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis(port=self.port, password=self.password, socket_connect_timeout=0.2)
        for _ in range(400):
            try:
                client.ping()
                return self
            except redis.exceptions.ConnectionError:
                time.sleep(0.025)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, password=self.password)


P = TypeVar("P", bound=RedisProcess)


def wait_cluster_ok(nodes: Sequence[RedisProcess], timeout_s: float = 20.0) -> None:
    """Waits until every node reports `cluster_state:ok`."""
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


def start_cluster(root: Path, node: type[P], masters: int = 3, replicas: int = 0) -> list[P]:
    """A local Redis Cluster of `masters` masters with `replicas` replicas each (the first
    `masters` nodes start as masters). Each node keeps its cluster config in its own folder,
    so a node stopped and started again rejoins with its role and slots (its data is gone).
    A 2 s node timeout: a replica takes over from a dead master within a few seconds."""
    nodes = [
        node(root / str(i), "--cluster-enabled", "yes", "--cluster-node-timeout", "2000")
        for i in range(masters * (1 + replicas))
    ]
    try:
        for n in nodes:
            n.start()
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes),
             "--cluster-replicas", str(replicas), "--cluster-yes"],
            check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=30,
        )  # fmt: skip
        wait_cluster_ok(nodes)
        _wait_replicas(nodes, replicas)
    except BaseException:
        for n in nodes:
            n.stop()
        raise
    return nodes


def _wait_replicas(nodes: Sequence[RedisProcess], replicas: int, timeout_s: float = 20.0) -> None:
    """Waits until every node sees each slot range with its replicas, each replica synced."""
    deadline = time.monotonic() + timeout_s
    while True:
        ranges = [n.client().execute_command("CLUSTER SLOTS") for n in nodes]
        roles = [n.client().info("replication") for n in nodes]
        if all(len(r) - 2 == 1 + replicas for slots in ranges for r in slots) and all(
            role.get("master_link_status", "up") == "up" for role in roles
        ):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"cluster replicas not ready: {ranges}")
        time.sleep(0.05)
