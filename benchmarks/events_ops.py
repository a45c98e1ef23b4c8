"""What KV events cost the cache's calls: `python -m benchmarks.bench_events ops`.

`ops` plays the same request stream (`benchmarks/streams.py`, the call sequence of
`benchmarks/ops.py`) on caches without a sink (`none`, and `none_again`: the run's noise
floor), with a sink that ignores its reports (`hook`), hashing each new leaf's pages without
events (`hash_only`, a control), with the recorder flushing to a null publisher (`null`: it
reads nothing, so the step's events stay in arrays, `uniradix.events.packed`), publishing to
a real ZMQ socket (`zmq` from the sender thread, `zmq_per_batch` from a thread woken per
batch, `zmq_inline` from the caller) and, with `--before REV`, the recorder of an older
revision (`null_before`, `zmq_before`), with `--python-hashing` the `hash_only`, `null` and
`zmq` modes again with the native module switched off (`*_pyhash`: the page chain in Python
and hashlib), with `--eager-flush` the `null` and `zmq` modes with each step's events packed
at the flush as before h12c (`*_eager`: numpy views, parent hashes and records made by the
scheduler's thread; now whoever reads the step makes them), with `--flush-hashing` the
`null` and `zmq` modes with each step's digests hashed at the flush as before h12d
(`*_hashed`; now whoever makes the events hashes them), at each `--page-sizes`, each mode
also with the CPU caches cooled between steps (`--cool-kb`). All variants play in one
process, 25 requests at a time in turn. The timed cache calls (match / insert / evict
medians) show the cost inside and next to the events' work; that work itself is counted per
request (one request is one scheduler step): the flush in the caller (coalescing, queueing;
hashing, encoding and sending too when inline, hashing with `*_hashed`; wall time) and a
sender thread's hashing, encoding and sending (its CPU clock).
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.ops import OPS, serve_batch, summarize
from benchmarks.streams import Request, StreamSpec, requests
from benchmarks.trace import TRACE as MOONCAKE_TRACE
from benchmarks.uniradix_side import FullAdapter, build_full
from uniradix import native
from uniradix.events import KVEventsConfig, KVEventStream, NullEventPublisher, ZmqEventPublisher
from uniradix.events.packed import StepEvents
from uniradix.events.recorder import EventRecorder
from uniradix.events.stream import PUBLISH_INTERVAL_MS
from uniradix.hashing.page import chain_digests
from uniradix.types import InsertParams, InsertResult

ROOT = Path(__file__).resolve().parents[1]
TRACE = str(MOONCAKE_TRACE)


class StepAdapter(FullAdapter):
    """FullAdapter ending each request (a scheduler step) after its insert: the event stream,
    if any, is flushed (timed apart), then, with `cool_kb`, a buffer of that size is written
    so that the next step's calls find the CPU caches as cold as after a server's other work
    between steps (the same in every mode, events or not; 64 MiB is twice this machine's
    L3). With `hash_only` (no events) it hashes the new leaf's pages instead of flushing:
    the flush's main work without the events, a control for what work of that size between
    steps does to the next calls."""

    def __init__(
        self,
        adapter: FullAdapter,
        stream: KVEventStream | None = None,
        cool_kb: int = 0,
        hash_only: bool = False,
    ) -> None:
        super().__init__(adapter.cache)
        self.stream = stream
        self.flush_ns: list[int] = []
        self._hash_only = hash_only
        self._inserting = 0  # units of the key being inserted
        # numpy releases the GIL while it writes, so a sender thread may run meanwhile, as it
        # would while a server waits on the GPU; its CPU time is counted all the same.
        self._cool = np.zeros(cool_kb * 1024 // 8, dtype=np.int64) if cool_kb else None

    def insert_params(
        self, tokens: list[int], value: torch.Tensor, prev_len: int, state: torch.Tensor | None
    ) -> InsertParams:
        self._inserting = len(tokens)
        return super().insert_params(tokens, value, prev_len, state)

    def after_insert(self, result: InsertResult, state: Any) -> None:
        t0 = time.perf_counter_ns()
        if self.stream is not None:
            self.stream.flush()
            self.flush_ns.append(time.perf_counter_ns() - t0)
        elif self._hash_only:
            if result.prefix_len < self._inserting:  # a new leaf
                chain_digests(result.last_device_node.key, self.page_size)
            self.flush_ns.append(time.perf_counter_ns() - t0)
        if self._cool is not None:
            self._cool += 1

    def sender_ns(self) -> int:
        """Encoding and sending done by publisher threads (inline senders do it within the
        flush, already timed there)."""
        if self.stream is None:
            return 0
        return sum(
            p.busy_ns
            for p in self.stream.publishers
            if isinstance(p, ZmqEventPublisher) and p.config.sender == "thread"
        )


class IdleSink:
    """A sink that ignores every report: the hook sites' own cost, nothing downstream."""

    def on_stored(self, node: Any, medium: str) -> None:
        return

    def on_removed(self, node: Any, medium: str) -> None:
        return

    def on_aux_stored(self, node: Any, component: int, pages: int, medium: str) -> None:
        return

    def on_cleared(self) -> None:
        return

    def redistribute_on_split(self, parent: Any, child: Any, split_len: int) -> None:
        return


TIMED_OPS = ("match", "insert", "evict")
MODES = (
    "none",
    "none_again",
    "hook",
    "hash_only",
    "null",
    "null_every_step",
    "zmq",
    "zmq_every_step",
    "zmq_per_batch",
    "zmq_inline",
)
EVERY_STEP = "_every_step"  # a mode's variant publishing at every flush (publish_interval_ms=0)
PYHASH = "_pyhash"  # a mode's variant hashing in Python (native module off)
PYHASH_MODES = tuple(m + PYHASH for m in ("hash_only", "null", "zmq"))
EAGER = "_eager"  # a mode's variant whose flush packs the step at once (before h12c)
EAGER_MODES = tuple(m + EAGER for m in ("null", "zmq"))
HASHED = "_hashed"  # a mode's variant hashing the step's digests at the flush (before h12d)
HASHED_MODES = tuple(m + HASHED for m in ("null", "zmq"))
SEGMENT = 25  # requests a variant plays before the next one's turn (ops)
OPS_STREAMS = {
    "chat": (StreamSpec("chat"), 1 << 16),
    "mooncake": (StreamSpec("mooncake", scale=0.1, trace_path=TRACE), 1 << 20),
}


class EagerRecorder(EventRecorder):
    """The recorder with its flush packing the step at once, in the caller (before h12c)."""

    def take_step(self) -> StepEvents:
        events = super().take_step()
        events.packed  # noqa: B018 (made now, as the flush did)
        return events


class HashingRecorder(EventRecorder):
    """The recorder with its flush hashing the step's digests, in the caller (before h12d:
    now whoever makes the events hashes them, the sender thread with ZMQ)."""

    def take_step(self) -> StepEvents:
        events = super().take_step()
        for run in events.runs:
            for cell in run.cells:
                cell.blob()
            if run.prior is not None:
                run.prior.blob()
        return events


def git_show(rev: str, path: str) -> str:
    return subprocess.run(
        ["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def _before_recorder(rev: str) -> type[Any]:
    """`EventRecorder` as it was at git revision `rev`, loaded beside the current one with
    that revision's `events/packed.py` (its steps' own classes), so before and after run side
    by side in one process. A recorder older than `take_step` hands its events as lists."""
    modules = {}
    for name in ("packed", "recorder"):
        path = f"uniradix/events/{name}.py"
        try:
            source = git_show(rev, path)
        except subprocess.CalledProcessError:
            continue  # `packed` came later: the recorder of `rev` makes lists
        module = types.ModuleType(f"{name}_before_{rev}")
        sys.modules[module.__name__] = module  # dataclasses look their module up there
        saved = sys.modules.get("uniradix.events.packed")
        if "packed" in modules:  # the recorder imports its own revision's classes
            sys.modules["uniradix.events.packed"] = modules["packed"]
        try:
            exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
        finally:
            if saved is not None:
                sys.modules["uniradix.events.packed"] = saved
        modules[name] = module
    recorder: type[Any] = modules["recorder"].EventRecorder
    if not hasattr(recorder, "take_step"):
        recorder = type(
            "EventRecorderBefore", (recorder,), {"take_step": lambda self: self.take_events()}
        )
    return recorder


def _adapter(
    mode: str, page_size: int, pool: int, before: type[Any] | None, cool_kb: int
) -> StepAdapter:
    adapter = build_full(page_size, pool)
    mode = mode.removesuffix(PYHASH)
    for suffix, recorder in ((EAGER, EagerRecorder), (HASHED, HashingRecorder)):
        if mode.endswith(suffix):
            step = _adapter(mode.removesuffix(suffix), page_size, pool, None, cool_kb)
            assert step.stream is not None
            step.stream.recorder = recorder(step.cache)
            step.cache.set_event_sink(step.stream.recorder)
            return step
    if mode in ("none", "none_again"):
        return StepAdapter(adapter, None, cool_kb)
    if mode == "hook":
        adapter.cache.set_event_sink(IdleSink())
        return StepAdapter(adapter, None, cool_kb)
    if mode == "hash_only":
        return StepAdapter(adapter, None, cool_kb, hash_only=True)
    sender = "inline" if mode == "zmq_inline" else "thread"
    wait_ms = 0.0 if mode == "zmq_per_batch" else KVEventsConfig.sender_wait_ms
    config = KVEventsConfig(endpoint="tcp://127.0.0.1:*", sender=sender, sender_wait_ms=wait_ms)
    publisher = ZmqEventPublisher(config) if mode.startswith("zmq") else NullEventPublisher()
    interval = 0.0 if mode.endswith(EVERY_STEP) else PUBLISH_INTERVAL_MS
    stream = KVEventStream(adapter.cache, [publisher], publish_interval_ms=interval)
    if mode.endswith("before") and before is not None:
        stream.recorder = before(adapter.cache)
        adapter.cache.set_event_sink(stream.recorder)
    return StepAdapter(adapter, stream, cool_kb)


def bench_ops(
    rounds: int,
    page_sizes: list[int],
    before_rev: str | None,
    cool_kbs: list[int],
    stream_names: list[str],
    python_hashing: bool = False,
    eager_flush: bool = False,
    flush_hashing: bool = False,
) -> dict[str, Any]:
    """Per-op medians of match / insert / evict and the step's event work per request, for
    every mode in one process, modes interleaved round by round (the machine's drift hits
    all alike), each mode with the CPU caches left as the step left them (`cool_kb` 0) and
    with `cool_kb` written between steps (`StepAdapter`).
    Modes: `none` no sink; `none_again` the same on a cache of its own (the run's noise
    floor: whatever it reads against `none` is not the events'); `hook` a sink that ignores
    its reports (the call sites' cost);
    `hash_only` no sink, the new leaf's pages hashed between steps (a control: the flush's
    main work without events);
    `null` the recorder flushed to a `NullEventPublisher`; `zmq` publishing over loopback
    ZMQ (sender thread), `zmq_per_batch` the same with a thread sending each batch as it
    comes (`sender_wait_ms=0`), `zmq_inline` sent by the caller; `null_before` and
    `zmq_before` the same as `null` and `zmq` with the recorder of git revision
    `before_rev`.

    Where the event work is counted: the calls' medians hold what the hooks do inside the
    calls, and whatever a sender thread's work takes from them (the GIL); the flush
    (coalescing, queueing; hashing, encoding and sending too when inline, hashing with
    `*_hashed`) is timed per request in the caller, and a sender thread's hashing, encoding
    and sending per request from its own clock (`sender_us_per_request`);
    `calls_with_step_vs_none` adds both to the calls."""
    streams = {name: OPS_STREAMS[name] for name in stream_names}
    before = _before_recorder(before_rev) if before_rev else None
    modes = (*MODES, "null_before", "zmq_before") if before else MODES
    if python_hashing:
        modes = (*modes, *PYHASH_MODES)
    if eager_flush:
        modes = (*modes, *EAGER_MODES)
    if flush_hashing:
        modes = (*modes, *HASHED_MODES)
    variants = [(mode, kb) for kb in cool_kbs for mode in modes]
    out: dict[str, Any] = {"before_rev": before_rev, "rounds": rounds, "cool_kb": cool_kbs}
    for page_size in page_sizes:
        for name, (spec, pool) in streams.items():
            runs: dict[tuple[str, int], list[dict[str, Any]]] = {v: [] for v in variants}
            reqs = list(requests(spec))
            for round_index in range(rounds):
                # Each cooling apart: a warm variant never plays right after a cooled one.
                for kb in cool_kbs:
                    group = [v for v in variants if v[1] == kb]
                    played = _interleaved(group, page_size, pool, before, reqs, round_index)
                    for variant, run in played.items():
                        runs[variant].append(run)
            for kb in cool_kbs:
                key = f"{name}_page{page_size}" + (f"_cool{kb}kb" if kb else "")
                out[key] = summary = _ops_summary({m: runs[m, kb] for m in modes})
                print(key, json.dumps(summary["ratio_vs_none"]))
                print("   paired min", json.dumps(summary["paired_min_ratio_vs_none"]))
                print("   step us/request", json.dumps(summary["step_us_per_request"]))
    return out


def _interleaved(
    variants: list[tuple[str, int]],
    page_size: int,
    pool: int,
    before: type[Any] | None,
    reqs: list[Request],
    seed: int,
) -> dict[tuple[str, int], dict[str, Any]]:
    """Every variant (mode, cool_kb) plays `reqs` on its own cache, `SEGMENT` requests at a
    time in turn, so that the machine's drift reaches all alike within a fraction of a
    second. A switch leaves the next variant's first request of a segment with another's
    CPU caches (and, after a sender thread's step, its last encoding), so the order is
    shuffled per segment: no variant always follows the same one (a fixed rotation made
    `none` always follow the variant that had just cooled the caches, flattering every
    ratio against it by up to 5-10%)."""
    adapters = {v: _adapter(v[0], page_size, pool, before, v[1]) for v in variants}
    times = {v: {op: [] for op in OPS} for v in variants}
    totals = {v: {"prompt": 0, "hit": 0, "failed": 0, "num": 0, "wall_ns": 0} for v in variants}
    order = list(variants)
    shuffler = random.Random(seed)
    native_on = native.HAVE_NATIVE
    for start in range(0, len(reqs), SEGMENT):
        for v in order:
            native.HAVE_NATIVE = native_on and not v[0].endswith(PYHASH)
            for req in reqs[start : start + SEGMENT]:
                serve_batch(adapters[v], [req], times[v], totals[v])
        shuffler.shuffle(order)
    native.HAVE_NATIVE = native_on
    out = {}
    for v, adapter in adapters.items():
        adapter.check()
        calls = {op: np.array(times[v][op], dtype=np.int64) for op in TIMED_OPS if times[v][op]}
        ops, num = summarize(times[v]), totals[v]["num"]
        run: dict[str, Any] = {
            "median_us": {op: ops[op]["median_us"] for op in TIMED_OPS if op in ops},
            "count": {op: ops[op]["count"] for op in TIMED_OPS if op in ops},
            "requests": num,
            "hit_rate": totals[v]["hit"] / totals[v]["prompt"],
            "call_ns": calls,  # per call, in stream order (`_paired_min`; not kept)
        }
        if adapter.stream is not None:
            adapter.stream.close()  # the sender thread has sent everything: its clock is final
            run["events"] = adapter.stream.events_published
        if adapter.flush_ns:
            run["flush_us_per_request"] = sum(adapter.flush_ns) / 1e3 / num
            run["sender_us_per_request"] = adapter.sender_ns() / 1e3 / num
        out[v] = run
    return out


def _ops_summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per mode: each op's median over the rounds' medians and its ratio to `none`, with the
    range of the per-round ratios (each round's mode against that round's `none`); the
    paired ratio (`_paired_min`); the flush and the sender thread's work per request
    (medians over rounds) and the calls' total with them, as a ratio."""
    paired = _paired_min(runs)
    median_us = {
        mode: {op: statistics.median(r["median_us"][op] for r in rs) for op in rs[0]["median_us"]}
        for mode, rs in runs.items()
    }
    base = median_us["none"]
    ratio = {
        mode: {op: round(v / base[op], 3) for op, v in ops.items()}
        for mode, ops in median_us.items()
    }
    none_runs = runs["none"]
    ratio_range = {}
    for mode, rs in runs.items():
        per_round = {
            op: [
                r["median_us"][op] / b["median_us"][op] for r, b in zip(rs, none_runs, strict=True)
            ]
            for op in rs[0]["median_us"]
        }
        ratio_range[mode] = {
            op: [round(min(v), 3), round(max(v), 3)] for op, v in per_round.items()
        }
    flush, sender = {}, {}
    for mode, rs in runs.items():
        if "flush_us_per_request" in rs[0]:
            flush[mode] = round(statistics.median(r["flush_us_per_request"] for r in rs), 1)
            sender[mode] = round(statistics.median(r["sender_us_per_request"] for r in rs), 1)
    step = {mode: round(flush[mode] + sender[mode], 1) for mode in flush}
    # The timed calls per request, robust to this machine's spikes: each op's median
    # (over rounds of per-run medians) times its calls per request.
    calls_us = {
        mode: sum(median_us[mode][op] * n / rs[0]["requests"] for op, n in rs[0]["count"].items())
        for mode, rs in runs.items()
    }
    with_step = {
        mode: round((calls_us[mode] + step.get(mode, 0.0)) / calls_us["none"], 3) for mode in runs
    }
    return {
        "median_us": median_us,
        "ratio_vs_none": ratio,
        "ratio_range_over_rounds": ratio_range,
        "paired_min_ratio_vs_none": paired,
        "flush_us_per_request": flush,
        "sender_us_per_request": sender,
        "step_us_per_request": step,
        "calls_us_per_request": {m: round(v, 1) for m, v in calls_us.items()},
        "calls_with_step_vs_none": with_step,
        "runs": runs,
    }


def _paired_min(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Per mode and op, call by call against `none`: every mode plays the same calls in the
    same order on the same tree, so call i is the same work in each. Each call's fastest
    time over the rounds (the run the machine's other jobs stretched least) over `none`'s,
    median over the calls. A cost every call pays shows whatever the load; a stall that
    hits a call in some rounds only does not (the per-round medians above hold both).
    Drops the per-call times from `runs`."""
    calls = {mode: [r.pop("call_ns") for r in rs] for mode, rs in runs.items()}
    fastest = {
        mode: {op: np.min([c[op] for c in cs], axis=0) for op in cs[0]}
        for mode, cs in calls.items()
    }
    base = fastest["none"]
    return {
        mode: {op: round(float(np.median(t / base[op])), 3) for op, t in ops.items()}
        for mode, ops in fastest.items()
    }
