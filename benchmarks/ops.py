"""Plays a request stream against any cache through a small adapter, timing each call.

The same function drives uniradix (project environment) and SGLang (`.peer-venv`), so both
execute the identical call sequence documented in `benchmarks/streams.py`. The adapter only
builds parameter objects and reads results, outside the timed region; the timed region is
the cache call itself (`cache.match_prefix`, `cache.inc_lock_ref`, `cache.evict`,
`cache.insert`, `cache.dec_lock_ref`, which both libraries name alike) plus the slot gather
(`prefix_indices`) and the allocation (`alloc`).
"""

from __future__ import annotations

import gc
import os
import time
import tracemalloc
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch

from benchmarks.streams import Request, StreamDigest

OPS = ("match", "prefix_indices", "lock", "evict", "alloc", "insert", "unlock")


class CacheAdapter(Protocol):
    """What `play` needs from one side; `cache` exposes the five timed tree calls."""

    cache: Any
    page_size: int

    def match_params(self, prompt: list[int]) -> Any: ...
    def matched(self, result: Any) -> tuple[int, Any]: ...
    def prefix_indices(self, result: Any, node: Any, num_tokens: int) -> torch.Tensor: ...
    def evict_params(self, num_tokens: int) -> Any | None: ...
    def alloc(self, num_tokens: int) -> torch.Tensor | None: ...
    def alloc_state(self) -> tuple[bool, torch.Tensor | None]: ...
    def insert_params(
        self, tokens: list[int], value: torch.Tensor, prev_len: int, state: torch.Tensor | None
    ) -> Any: ...
    def after_insert(self, result: Any, state: torch.Tensor | None) -> None: ...
    def dec_params(self, receipt: Any) -> Any: ...
    def free(self, slots: torch.Tensor) -> None: ...
    def cached_tokens(self) -> int: ...
    def check(self) -> None: ...


def _percentile(sorted_ns: list[int], q: float) -> float:
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / 1000.0


def summarize(times_ns: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """Per op: calls, median and p99 in microseconds, total in milliseconds."""
    out: dict[str, dict[str, float]] = {}
    for op, values in times_ns.items():
        if not values:
            continue
        values.sort()
        out[op] = {
            "count": len(values),
            "median_us": _percentile(values, 0.5),
            "p99_us": _percentile(values, 0.99),
            "total_ms": sum(values) / 1e6,
        }
    return out


class Player:
    """Plays a stream batch by batch (see `play`), so that two sides can take turns on the
    same machine: `step` serves the next batches, `finish` gives `play`'s result."""

    def __init__(self, adapter: CacheAdapter, stream: Iterable[Request], batch: int = 1) -> None:
        self.adapter = adapter
        self.times: dict[str, list[int]] = {op: [] for op in OPS}
        self.totals = {"prompt": 0, "hit": 0, "failed": 0, "num": 0, "wall_ns": 0}
        self.digest = StreamDigest()
        self._requests = iter(stream)
        self._batch = batch

    def step(self, num_batches: int) -> bool:
        """Serves up to `num_batches` more batches; True once the stream is played out."""
        for _ in range(num_batches):
            pending: list[Request] = []
            for req in self._requests:
                self.digest.update(req)
                pending.append(req)
                if len(pending) == self._batch:
                    break
            if not pending:
                return True
            serve_batch(self.adapter, pending, self.times, self.totals)
            if len(pending) < self._batch:
                return True
        return False

    def finish(self) -> dict[str, Any]:
        """Checks the cache's invariants; returns timings, hit rate and counts."""
        self.adapter.check()
        totals, prompt_tokens = self.totals, self.totals["prompt"]
        return {
            "requests": totals["num"],
            "failed": totals["failed"],
            "stream_digest": self.digest.hexdigest(),
            "hit_rate": totals["hit"] / prompt_tokens if prompt_tokens else 0.0,
            "wall_s": totals["wall_ns"] / 1e9,
            "cached_tokens": self.adapter.cached_tokens(),
            "ops": summarize(self.times),
        }


def play(adapter: CacheAdapter, stream: Iterable[Request], batch: int = 1) -> dict[str, Any]:
    """Serves every request of `stream` in order, `batch` at a time (steps 1-3 for each
    request of a batch, then steps 4-7 for each); returns timings, hit rate and counts."""
    player = Player(adapter, stream, batch)
    while not player.step(1 << 30):
        pass
    return player.finish()


def serve_batch(
    adapter: CacheAdapter,
    batch: list[Request],
    times: dict[str, list[int]],
    totals: dict[str, int],
) -> None:
    """Serves one batch (see `play`), appending each call's time to `times[op]` and adding
    to `totals` (`num`, `prompt`, `hit`, `failed`, `wall_ns`)."""
    cache, ps = adapter.cache, adapter.page_size
    clock = time.perf_counter_ns
    admitted = []
    for req in batch:
        totals["num"] += 1
        totals["prompt"] += req.prompt_len
        match_p = adapter.match_params(req.tokens[: req.prompt_len])
        start = clock()

        t0 = clock()
        result = cache.match_prefix(match_p)
        t1 = clock()
        times["match"].append(t1 - t0)
        matched, node = adapter.matched(result)
        totals["hit"] += matched

        t0 = clock()
        prefix = adapter.prefix_indices(result, node, matched)
        t1 = clock()
        times["prefix_indices"].append(t1 - t0)

        t0 = clock()
        receipt = cache.inc_lock_ref(node)
        t1 = clock()
        times["lock"].append(t1 - t0)
        totals["wall_ns"] += clock() - start
        admitted.append((req, matched, node, prefix, adapter.dec_params(receipt)))

    for req, matched, node, prefix, dec_p in admitted:
        total = len(req.tokens)
        aligned = total // ps * ps
        insert_key = req.tokens[:aligned]
        need = -(-(total - matched) // ps) * ps
        start = clock()
        evict_p = adapter.evict_params(need)
        if evict_p is not None:
            t0 = clock()
            cache.evict(evict_p)
            t1 = clock()
            times["evict"].append(t1 - t0)

        t0 = clock()
        slots = adapter.alloc(need)
        t1 = clock()
        times["alloc"].append(t1 - t0)
        has_state, state = adapter.alloc_state() if slots is not None else (False, None)
        if slots is None or not has_state:
            totals["failed"] += 1
            if slots is not None:
                adapter.free(slots)
            cache.dec_lock_ref(node, dec_p)
            totals["wall_ns"] += clock() - start
            continue

        value = torch.cat([prefix, slots[: aligned - matched]])
        insert_p = adapter.insert_params(insert_key, value, matched, state)
        t0 = clock()
        inserted = cache.insert(insert_p)
        t1 = clock()
        times["insert"].append(t1 - t0)
        adapter.after_insert(inserted, state)
        if aligned - matched < need:
            adapter.free(slots[aligned - matched :])

        t0 = clock()
        cache.dec_lock_ref(node, dec_p)
        t1 = clock()
        times["unlock"].append(t1 - t0)
        totals["wall_ns"] += clock() - start


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Measurement:
    """`measure` in steps: the timed pass is played with `step` (so two sides can take turns
    on the machine, chunk by chunk), `finish` adds the heap pass and returns the result."""

    def __init__(
        self,
        make_adapter: Callable[[], CacheAdapter],
        stream: Callable[[], Iterable[Request]],
        heap: bool = True,
        batch: int = 1,
    ) -> None:
        self._make, self._stream, self._heap, self._batch = make_adapter, stream, heap, batch
        adapter = make_adapter()
        gc.collect()
        self._rss0 = _rss_bytes()
        self._player = Player(adapter, stream(), batch)

    def step(self, num_batches: int) -> bool:
        return self._player.step(num_batches)

    def finish(self) -> dict[str, Any]:
        while not self._player.step(1 << 30):
            pass
        out = self._player.finish()
        out["rss_growth_mb"] = (_rss_bytes() - self._rss0) / 2**20
        if not self._heap:
            return out
        del self._player
        gc.collect()
        adapter = self._make()
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        traced = play(adapter, self._stream(), self._batch)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        cached = traced["cached_tokens"]
        out["heap_bytes_per_cached_token"] = grown / cached if cached else 0.0
        return out


def measure(
    make_adapter: Callable[[], CacheAdapter],
    stream: Callable[[], Iterable[Request]],
    heap: bool = True,
    batch: int = 1,
) -> dict[str, Any]:
    """A timed pass, then (with `heap`) an untimed pass on a fresh cache under tracemalloc:
    the Python heap the cache grew by (pools are built before tracing starts, torch storage
    is invisible to tracemalloc on both sides) per token cached at the end. RSS growth over
    the timed pass is reported too: it also sees native heaps such as SGLang's Rust core."""
    return Measurement(make_adapter, stream, heap, batch).finish()
