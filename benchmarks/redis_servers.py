"""Local `redis-server` processes for benchmarks: a free loopback port, no persistence, any
extra server flags (`--requirepass`, `--maxmemory`), stop and restart on the same port."""

from __future__ import annotations

import random
import socket
import subprocess
import time
from pathlib import Path

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
