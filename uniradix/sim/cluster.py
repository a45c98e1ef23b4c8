"""Multi-instance replay: N serving instances, each its own cache, pools and scheduler,
behind a router. Every instance publishes KV events; a `KVEventIndex` built only from them
is what the `cache-aware` router consults (and `--kv-events` also puts them on ZeroMQ).

Arrivals: requests are handed to the router in arrival order while the cluster has fewer
than `instances * max_running` outstanding (a saturated cluster, as the single replay is a
saturated server), and a request waiting on an earlier one (a conversation's next turn) is
routed once that one finished, wherever it ran. Then every instance takes one scheduler step,
and its events are flushed.

`dispatch="late"` keeps the requests at the router instead, and routes one only when an
instance can admit it (late binding: `uniradix.sim.late_dispatch`). `await_turns` holds a
prompt that holds the whole of one still being prefilled until that prefill is published
(`uniradix.sim.turn_gate`). The default (`dispatch="auto"`, `await_turns=None`) is both for
a cache-aware router over more than one instance: they raised its hit rate on every hybrid
config and on full attention (docs/events.md). Other routers ignore the index late binding
waits on, and one instance stays the single replay, so those dispatch early.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import asdict, replace
from functools import partial
from typing import Any

from uniradix.events.groups import publishes_groups
from uniradix.events.index import IndexPublisher, KVEventIndex
from uniradix.events.publisher import (
    EventPublisher,
    KVEventsConfig,
    ZmqEventPublisher,
    offset_endpoint_port,
)
from uniradix.events.stream import KVEventStream
from uniradix.events.subscription import SnapshotServer
from uniradix.key import RadixKey
from uniradix.sim.admission_check import admits_now
from uniradix.sim.batch import RunningRequest, SchedulerView
from uniradix.sim.instance import Instance
from uniradix.sim.late_dispatch import LOOKAHEAD, next_late
from uniradix.sim.metrics import ReplayMetrics
from uniradix.sim.predictions import FIELDS as PREDICTION_FIELDS
from uniradix.sim.predictions import HitPredictions
from uniradix.sim.replay import (
    CONFIG_COMPONENTS,
    NullRunner,
    ReplayOptions,
    admissible,
    build_replay_cache,
    load_specs,
)
from uniradix.sim.router import CacheAware, RouterFactory, make_router
from uniradix.sim.scheduler import Scheduler
from uniradix.sim.turn_gate import TurnGate
from uniradix.storage.backend import StorageBackend, open_backend
from uniradix.types import EvictResult, MatchResult

# `Cluster(dispatch=)`: route on arrival, when admissible, or `auto` (the module's docstring)
DISPATCH = ("auto", "early", "late")


class _Listener:
    """Forwards an instance's scheduler reports to its metrics, flushes its events once per
    step, and tells the cluster which requests finished."""

    def __init__(self, cluster: Cluster, inst_index: int) -> None:
        self.cluster = cluster
        self.i = inst_index

    def _inst(self) -> Instance:
        return self.cluster.instances[self.i]

    def on_match(self, rid: int, key: RadixKey, match: MatchResult) -> None:
        self._inst().metrics.on_match(rid, key, match)

    def on_admit(self, request: RunningRequest, match: MatchResult) -> None:
        self._inst().metrics.on_admit(request, match)
        if request.num_admissions == 1:
            self.cluster.predictions.admitted(self.i, request.spec.rid)

    def on_evict(self, result: EvictResult) -> None:
        self._inst().metrics.on_evict(result)

    def on_retract(self, request: RunningRequest) -> None:
        self._inst().metrics.on_retract(request)

    def on_finish(self, request: RunningRequest) -> None:
        inst = self._inst()
        inst.metrics.on_finish(request)
        self.cluster.prefilled(self.i, request.spec.rid)
        self.cluster.finished(inst.global_rids[request.spec.rid])

    def on_step(self, scheduler: SchedulerView) -> None:
        inst = self._inst()
        inst.metrics.on_step(scheduler)
        inst.stream.flush()
        if inst.snapshots is not None:
            inst.snapshots.serve()
        gate = self.cluster.gate
        if gate is not None and (pending := gate.pending(self.i)):
            for request in scheduler.running:  # after the flush: the index has the pages
                if request.prefilled and request.spec.rid in pending:
                    self.cluster.prefilled(self.i, request.spec.rid)


class Cluster:
    def __init__(
        self,
        options: ReplayOptions,
        num_instances: int,
        router: str | RouterFactory,
        kv_events: KVEventsConfig | None = None,
        dispatch: str = "auto",
        await_turns: bool | None = None,
    ) -> None:
        """`router`: a name in `ROUTERS`, or a factory (a router with options, a study's
        oracle) called with the cluster's index, instance names and `recent`; `dispatch`:
        one of `DISPATCH`; `await_turns` None: as late binding is (the module's docstring)."""
        if dispatch not in DISPATCH:
            raise ValueError(f"unknown dispatch {dispatch!r}; choose from {DISPATCH}")
        if num_instances < 1:
            raise ValueError(f"instances must be >= 1, got {num_instances}")
        if options.config not in CONFIG_COMPONENTS:
            raise ValueError(
                f"unknown config {options.config!r}; choose from {sorted(CONFIG_COMPONENTS)}"
            )
        if options.sessions:
            raise ValueError("--sessions is not reported per instance yet: replay one instance")
        self.shared_storage: StorageBackend | None = None
        storage = options.storage
        if storage.storage_url is not None and storage.storage_backend is None:
            # One store behind every instance: what one writes, the others read.
            self.shared_storage = open_backend(storage.storage_url)
            options = options.updated(storage_backend=self.shared_storage)
        self.options = options
        ps, full_tokens = options.pools.page_size, options.pools.full_tokens
        self.num_loaded = len(loaded := load_specs(options))
        self.specs = admissible(loaded, full_tokens // ps * ps, ps)
        if not self.specs:
            raise ValueError(f"no request fits full_tokens={full_tokens}")
        max_len = max(len(s.prompt) + s.output_len for s in self.specs)
        events = kv_events or KVEventsConfig()  # its hashing and groups also without ZMQ
        hash_algo, hash_seed = events.hash_algo, events.hash_seed
        self.index = KVEventIndex(ps, hash_algo=hash_algo, hash_seed=hash_seed)
        names = [f"instance-{i}" for i in range(num_instances)]
        recent = num_instances * options.scheduler.max_running
        factory = router if callable(router) else partial(make_router, router)
        self.router = factory(self.index, names, recent)
        self.router_name = router if isinstance(router, str) else type(self.router).__name__
        self.predictions = HitPredictions(self.index, names)
        config = options.scheduler
        self.instances: list[Instance] = []
        for i, name in enumerate(names):
            cache = build_replay_cache(options, options.config, -(-max_len // ps) * ps)
            if cache.host_tier.storage is not None:
                cache.host_tier.storage.backpressure = cache.host_tier.storage.sync_writes = True
            publishers: list[EventPublisher] = [IndexPublisher(self.index, name)]
            if kv_events is not None and kv_events.publisher == "zmq":
                publishers.append(
                    ZmqEventPublisher(replace(kv_events, dp_rank=i, pod=kv_events.pod or name))
                )
            snapshot_endpoint = None
            if len(publishers) > 1 and kv_events is not None and kv_events.snapshot_endpoint:
                snapshot_endpoint = offset_endpoint_port(kv_events.snapshot_endpoint, i)
            scheduler = Scheduler(cache, NullRunner(), [], config, _Listener(self, i))
            metrics = ReplayMetrics(cache, 0, progress=False)
            self.instances.append(
                Instance(
                    name,
                    cache,
                    scheduler,
                    metrics,
                    # Every step: the router reads simulated steps, not the wall clock.
                    KVEventStream(
                        cache,
                        publishers,
                        hash_algo=hash_algo,
                        hash_seed=hash_seed,
                        publish_interval_ms=0,
                        groups=publishes_groups(
                            events.components, len(cache.components) - 1, events.wire
                        ),
                    ),
                )
            )
            if snapshot_endpoint is not None:  # served for the ZMQ publisher (the second)
                inst = self.instances[-1]
                inst.snapshots = SnapshotServer(inst.stream, snapshot_endpoint, publisher=1)
        self._ready: list[int] = []
        self._blocked: dict[int, list[int]] = {}
        for spec in self.specs:
            if spec.after is None:
                self._ready.append(spec.rid)
            else:
                self._blocked.setdefault(spec.after, []).append(spec.rid)
        self._outstanding = 0
        if dispatch == "auto":  # late binding asks the router to pick (`CacheAware.pick`)
            dispatch = (
                "late" if num_instances > 1 and isinstance(self.router, CacheAware) else "early"
            )
        self.late = dispatch == "late"
        self.dispatch = dispatch
        awaits = await_turns or (await_turns is None and self.late)
        self.gate = TurnGate(num_instances) if awaits else None
        self._hashes: dict[int, list[int]] = {}

    def prefilled(self, instance: int, rid: int) -> None:
        """Request `rid` (`instance`'s numbering) has its first token: the requests the turn
        gate held for it go back to the queue, in arrival order, and a cache-aware router
        stops counting it in flight."""
        if self.gate is None or (end := self.gate.pending(instance).get(rid)) is None:
            return
        if isinstance(self.router, CacheAware):
            self.router.prefilled(instance, end)
        for held in self.gate.prefilled(instance, rid):
            heapq.heappush(self._ready, held)

    def finished(self, rid: int) -> None:
        self._outstanding -= 1
        for waiting in self._blocked.pop(rid, []):
            heapq.heappush(self._ready, waiting)

    def _dispatch(self) -> None:
        running = self.options.scheduler.max_running
        window = len(self.instances) * running
        while self._ready and self._outstanding < window:
            loads = [inst.outstanding for inst in self.instances]
            if not self.late:
                rid = heapq.heappop(self._ready)
                if self.gate is None or not self.gate.hold(rid, self._hashes_of(rid)):
                    self._route(rid, loads)
                continue
            free = [  # a free running slot and nothing waiting there
                load < running and load == len(inst.scheduler.running)
                for load, inst in zip(loads, self.instances, strict=True)
            ]
            if not any(free):
                return
            if self.gate is not None:
                for rid in heapq.nsmallest(LOOKAHEAD, self._ready):
                    if self.gate.hold(rid, self._hashes_of(rid)):
                        self._ready.remove(rid)
                heapq.heapify(self._ready)
                if not self._ready:
                    return
            picked = next_late(
                self._ready,
                free,
                loads,
                self.router,
                self._hashes_of,
                self._admits,
                [not inst.scheduler.running for inst in self.instances],  # idle
            )
            if picked is None:  # no free instance has the memory: a step frees some
                return
            self._route(*picked)

    def _admits(self, instance: int, rid: int, hit: int) -> bool:
        """Whether `instance` would admit request `rid` at its next step, given the `hit`
        the router predicts there (`admission_check.admits_now`)."""
        spec = self.specs[rid]
        scheduler = self.instances[instance].scheduler
        return admits_now(scheduler, len(spec.prompt), hit, spec.output_len)

    def _hashes_of(self, rid: int) -> list[int]:
        """The page hashes of request `rid`'s prompt (kept until it is routed)."""
        if (hashes := self._hashes.get(rid)) is None:
            hashes = self._hashes[rid] = self.index.page_hashes(self.specs[rid].prompt.token_ids())
        return hashes

    def _route(self, rid: int, loads: list[int]) -> None:
        spec = self.specs[rid]
        tokens = spec.prompt.token_ids()
        choice = self.router.choose(tokens, loads)
        inst = self.instances[choice]
        expected = (
            self.router.expected_pages[choice] if isinstance(self.router, CacheAware) else None
        )
        self.predictions.routed(choice, len(inst.global_rids), tokens, expected)
        if self.gate is not None:
            self.gate.routed(choice, len(inst.global_rids), self._hashes_of(rid))
        self._hashes.pop(rid, None)
        inst.scheduler.submit(replace(spec, rid=len(inst.global_rids), after=None))
        inst.global_rids.append(spec.rid)
        self._outstanding += 1

    def run(self) -> dict[str, Any]:
        """Replays every request; returns the summary (`router`, `instances`, `hit_rate`,
        `load_imbalance`, `events_published`, `events_dropped`, ...)."""
        t0 = time.perf_counter()
        try:
            while True:
                self._dispatch()
                busy = [inst for inst in self.instances if not inst.scheduler.done]
                if not busy:
                    break
                for inst in busy:
                    inst.scheduler.step()
            for inst in self.instances:
                inst.cache.host_tier.drain()  # the last backups land before the leak check
                if inst.cache.host_tier.storage is not None:
                    inst.cache.host_tier.storage.flush()
                inst.scheduler.check_invariants()
        finally:
            for inst in self.instances:
                inst.stream.close()
                if inst.snapshots is not None:
                    inst.snapshots.close()
                if inst.cache.host_tier.storage is not None:
                    inst.cache.host_tier.storage.close()
        held = 0 if self.gate is None else self.gate.holding
        assert not self._ready and not self._blocked and not held, "requests left unrouted"
        summary = self._summary(time.perf_counter() - t0)
        if self.shared_storage is not None:
            self.shared_storage.close()  # after its counters are read
        return summary

    def _summary(self, wall_s: float) -> dict[str, Any]:
        per = [
            inst.summary() | t
            for inst, t in zip(self.instances, self.predictions.totals, strict=True)
        ]
        prompt = sum(p["prompt_tokens"] for p in per)
        hits = sum(p["hit_tokens"] for p in per)
        counts = [p["requests"] for p in per]
        return {
            "source": self.options.trace or self.options.workload,
            "config": self.options.config,
            "page_size": self.options.pools.page_size,
            "full_tokens_per_instance": self.options.pools.full_tokens,
            "router": self.router_name,
            "dispatch": self.dispatch,
            "await_turns": self.gate is not None,
            "instances": per,
            "requests": sum(counts),
            "rejected": self.num_loaded - len(self.specs),
            "prompt_tokens": prompt,
            "hit_tokens": hits,
            "hit_rate": hits / max(prompt, 1),
            **{key: sum(p[key] for p in per) for key in PREDICTION_FIELDS},
            "load_imbalance": max(counts) / (sum(counts) / len(counts)) if sum(counts) else 0.0,
            "hit_tokens_by_tier": {
                tier: sum(p["hit_tokens_by_tier"].get(tier, 0) for p in per)
                for tier in per[0]["hit_tokens_by_tier"]
            },
            "storage": None if self.shared_storage is None else asdict(self.shared_storage.stats()),
            "events_published": sum(p["events_published"] for p in per),
            "events_dropped": sum(p["events_dropped"] for p in per),
            "index": vars(self.index.stats),
            "wall_s": wall_s,
        }
