"""Faults an L3 store meets, injected at random times by a thread beside a running cache.

A Redis store (`RedisFaults`: a `redis_servers.RedisProcess` reached through a
`delay_proxy.DelayProxy`): the server killed and restarted empty; filled (`maxmemory` at
what it uses now, `noeviction`: every write refused); slowed (the proxy's latency set below
or above the client's timeout); pages corrupted in place (a flipped byte, a truncated value,
a deleted key, through a direct connection). A file store (`FileFaults`): page files with a
flipped byte, truncated, or deleted. Whatever the store's layout, any file under its
directory but its temp folder is fair game (found by a random walk down its folders).

`FaultInjector` runs one fault at a time: waits a random gap, injects the next kind of a
shuffled bag (so every kind comes round once per bag), holds it a random time, removes it,
and records when, at which operation count, what, and how many pages it touched.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from benchmarks.delay_proxy import DelayProxy
from benchmarks.redis_servers import RedisProcess

# Latencies a slow fault adds (each way of a round trip, so a reply takes twice this): the
# last is above the soak's 0.2 s client timeout, so its calls fail and the breaker opens.
SLOW_DELAYS_S = (0.01, 0.04, 0.08, 0.3)


@dataclass
class Fault:
    kind: str
    start: float  # time.monotonic() when injected
    end: float  # when removed (== start for a fault that is done at once: corruption)
    ops_start: int  # cache operations done when injected
    ops_end: int  # ... and when removed
    pages: int  # pages touched (corruption) or 0
    detail: str


FaultFn = Callable[[random.Random, threading.Event], tuple[int, str]]
"""Injects one fault, holds it (waiting on the event, set when the soak stops), removes it;
returns the pages it touched and a few words on what it did."""


class RedisFaults:
    def __init__(self, server: RedisProcess, proxy: DelayProxy, hold_s: tuple[float, float]):
        self.server = server
        self.proxy = proxy
        self.hold_s = hold_s

    def kinds(self) -> dict[str, FaultFn]:
        return {
            "redis killed, restarted empty": self.kill,
            "redis full (noeviction)": self.fill,
            "redis slow (proxy latency)": self.slow,
            "redis page byte flipped": lambda rng, stop: self.corrupt(rng, "flip"),
            "redis page truncated": lambda rng, stop: self.corrupt(rng, "truncate"),
            "redis page deleted": lambda rng, stop: self.corrupt(rng, "delete"),
        }

    def _hold(self, rng: random.Random, stop: threading.Event) -> float:
        hold = rng.uniform(*self.hold_s)
        stop.wait(hold)
        return hold

    def kill(self, rng: random.Random, stop: threading.Event) -> tuple[int, str]:
        self.server.stop()
        hold = self._hold(rng, stop)
        self.server.start()
        return 0, f"down {hold:.2f} s"

    def fill(self, rng: random.Random, stop: threading.Event) -> tuple[int, str]:
        client = self.server.client()
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", used)
        hold = self._hold(rng, stop)
        client.config_set("maxmemory", 0)
        client.close()
        return 0, f"full {hold:.2f} s"

    def slow(self, rng: random.Random, stop: threading.Event) -> tuple[int, str]:
        delay = rng.choice(SLOW_DELAYS_S)
        self.proxy.delay_s = delay
        hold = self._hold(rng, stop)
        self.proxy.delay_s = 0.0
        return 0, f"+{delay * 1000:.0f} ms each way for {hold:.2f} s"

    def corrupt(self, rng: random.Random, how: str) -> tuple[int, str]:
        client = self.server.client()
        touched = 0
        for _ in range(rng.randint(1, 8)):
            name = client.randomkey()
            value = None if name is None else client.get(name)
            if name is None or not isinstance(value, bytes) or not value:
                break
            if how == "flip":
                at = rng.randrange(len(value))
                client.setrange(name, at, bytes([value[at] ^ 1 << rng.randrange(8)]))
            elif how == "truncate":
                client.set(name, value[: rng.randrange(len(value))])
            else:
                client.delete(name)
            touched += 1
        client.close()
        return touched, how


class FileFaults:
    def __init__(self, directory: Path):
        self.directory = directory

    def kinds(self) -> dict[str, FaultFn]:
        return {
            "file page byte flipped": lambda rng, stop: self.corrupt(rng, "flip"),
            "file page truncated": lambda rng, stop: self.corrupt(rng, "truncate"),
            "file page deleted": lambda rng, stop: self.corrupt(rng, "delete"),
        }

    def _pick(self, rng: random.Random) -> Path | None:
        """A random file, by a random walk down from the store's folder (cheap on a big
        store: one folder listed per level; files in small folders are likelier)."""
        here = self.directory
        while True:
            try:
                entries = [e for e in os.scandir(here) if e.name != "tmp" or here != self.directory]
            except FileNotFoundError:  # a folder the store removed meanwhile
                return None
            if not entries:
                return None
            entry = rng.choice(entries)
            if entry.is_file(follow_symlinks=False):
                return Path(entry.path)
            here = Path(entry.path)

    def corrupt(self, rng: random.Random, how: str) -> tuple[int, str]:
        touched = 0
        for _ in range(rng.randint(1, 8)):
            path = self._pick(rng)
            if path is None:
                continue
            try:  # a page evicted or repaired meanwhile is simply gone
                if how == "delete":
                    path.unlink()
                else:
                    data = bytearray(path.read_bytes())
                    if not data:
                        continue
                    if how == "flip":
                        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
                    else:
                        del data[rng.randrange(len(data)) :]
                    path.write_bytes(bytes(data))
            except FileNotFoundError:
                continue
            touched += 1
        return touched, how


class FaultInjector:
    """Injects `kinds` one at a time on its own thread, `gap_s` (mean, exponential) apart;
    `ops()` reads the soak's operation count."""

    def __init__(
        self,
        kinds: dict[str, FaultFn],
        seed: int,
        gap_s: float,
        ops: Callable[[], int],
    ) -> None:
        self.kinds = kinds
        self.rng = random.Random(seed)
        self.gap_s = gap_s
        self.ops = ops
        self.faults: list[Fault] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-injector", daemon=True)

    def start(self) -> FaultInjector:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ends the fault in progress early (removing it) and stops."""
        self._stop.set()
        self._thread.join()

    def fewest(self) -> int:
        """How often the least injected kind was injected so far."""
        done = [f.kind for f in self.faults]
        return min(done.count(kind) for kind in self.kinds)

    def _run(self) -> None:
        bag: list[str] = []
        while not self._stop.wait(self.rng.expovariate(1 / self.gap_s)):
            if not bag:
                bag = sorted(self.kinds)
                self.rng.shuffle(bag)
            kind = bag.pop()
            start, ops_start = time.monotonic(), self.ops()
            try:
                pages, detail = self.kinds[kind](self.rng, self._stop)
            except (OSError, redis.exceptions.RedisError, RuntimeError) as exc:
                self.errors.append(f"{kind}: {type(exc).__name__}: {exc}")
                continue
            self.faults.append(
                Fault(kind, start, time.monotonic(), ops_start, self.ops(), pages, detail)
            )
