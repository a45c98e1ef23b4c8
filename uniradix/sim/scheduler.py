"""Scheduler: drives a `UnifiedRadixCache` one step at a time as a prefill-first
continuous-batching server does, and hands each batch to a `ModelRunner` (the replayer's
computes nothing, an engine's runs its model: both make the same cache and pool calls).

A step prefills if it can (the chunked request, then waiting ones in arrival order: match,
lock, row, allocation, evicting when short; page-aligned chunks, each published by
`cache_unfinished_req`), else decodes a token per request (retracting the fewest-outputs
ones while memory stays short); a request ends with `cache_finished_req`. Admission keeps
`decode_reserve_ratio` of the running outputs free; time only orders requests. Per
component: SWA frees out-of-window slots and drops passed window locks; Mamba needs a state
slot at admission, stops the first chunk at `mamba_branching_seqlen` and, in extra-buffer
mode, tracks the state at the last grid position a pass crosses (`ForwardEntry.track_seqlen`).
docs/replay.md spells the loop out.
"""

from __future__ import annotations

import heapq
from array import array

import numpy as np

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.key import RadixKey, Tokens
from uniradix.sim.batch import (
    ForwardBatch,
    ForwardEntry,
    ModelRunner,
    NullListener,
    RunningRequest,
    SchedulerListener,
    held_by,
)
from uniradix.sim.bulk_decode import bulk_allowed, decode_in_bulk, quiet_steps
from uniradix.sim.placement import CheckpointPlan
from uniradix.sim.prefetching import QueuePrefetch
from uniradix.sim.request_spec import RequestSpec
from uniradix.sim.row_slots import RowSlots
from uniradix.sim.scheduler_config import SchedulerConfig, SchedulerStalled
from uniradix.types import MatchPrefixParams, MatchResult, Req


class Scheduler:
    def __init__(
        self,
        cache: UnifiedRadixCache,
        runner: ModelRunner,
        specs: list[RequestSpec],
        config: SchedulerConfig | None = None,
        listener: SchedulerListener | None = None,
    ) -> None:
        self.cache = cache
        self.runner = runner
        self.config = config or SchedulerConfig()
        self.listener: SchedulerListener = listener or NullListener()
        self.page_size = cache.page_size
        self._window_steps = cache.has_window_steps  # per request per step: read once
        self.slots = RowSlots(cache, self.listener, self.config.decode_reserve_ratio)
        if (chunk := self.config.chunk_size) < self.page_size:
            raise ValueError(f"chunk_size={chunk} is less than one page ({self.page_size})")
        self.specs = specs
        self.checkpoints = CheckpointPlan(
            cache, self.config.checkpoint_placement, self.config.checkpoint_grid
        )
        self.running: list[RunningRequest] = []
        self.chunked: RunningRequest | None = None
        self.num_steps = 0
        self.num_invariant_checks = 0
        self._finished = [False] * len(specs)
        self._ready: list[int] = []  # heap of rids: arrival order
        self._blocked: dict[int, list[int]] = {}
        self._retracted: dict[int, RunningRequest] = {}
        self.prefetch = QueuePrefetch(cache, self.config.prefetch_lookahead)
        # The queue's head is retried each step until it fits: its tokens are kept (only its)
        self._last_tried: tuple[int, Tokens, RadixKey] | None = None
        for i, spec in enumerate(specs):
            if spec.rid != i:
                raise ValueError(f"spec rids must be 0, 1, ... in order; #{i} has rid {spec.rid}")
            if spec.after is None:
                self._ready.append(i)
            else:
                self._blocked.setdefault(spec.after, []).append(i)

    @property
    def queued(self) -> int:
        """Requests given to it and not admitted yet (waiting for memory or an earlier one)."""
        return len(self._ready) + sum(map(len, self._blocked.values()))

    @property
    def done(self) -> bool:
        return not self.running and not self._ready and not self._blocked

    def run(self) -> None:
        """Steps until every request finished; quiet decode steps in bulk where allowed
        (`uniradix.sim.bulk_decode`: same steps, same figures)."""
        bulk = bulk_allowed(self.cache, self.runner, self.config.check_invariants)
        while not self.done:
            can_prefill = self.chunked is not None or (
                bool(self._ready) and len(self.running) < self.config.max_running
            )
            free = self.cache.pools.kv_allocator.available_size()
            quiet = quiet_steps(self.running, can_prefill, free, self.page_size) if bulk else 0
            if quiet < 2:
                self.step()
                continue
            decode_in_bulk(self.running, self.runner, self.slots, quiet, self._bulk_step)

    def submit(self, spec: RequestSpec) -> None:
        """Adds a request arriving now (a router hands it on); it must be numbered next
        (`spec.rid == len(self.specs)`) and wait, if at all, on a request of this scheduler."""
        rid = len(self.specs)
        if spec.rid != rid or (spec.after is not None and not 0 <= spec.after < rid):
            raise ValueError(f"submit: spec rid={spec.rid} after={spec.after}, next rid is {rid}")
        self.specs.append(spec)
        self._finished.append(False)
        if spec.after is None or self._finished[spec.after]:
            heapq.heappush(self._ready, rid)
        else:
            self._blocked.setdefault(spec.after, []).append(rid)

    def step(self) -> None:
        """One scheduling step (a prefill batch, else a decode batch), then the checks."""
        host = self.cache.host_tier  # commit the host tier's finished transfers
        host.writing_check()
        host.loading_check()
        self.prefetch.start_waiting(self._ready, lambda rid: self._prompt_key(rid)[1])
        progressed = self._prefill_step() or self._decode_step()
        if not progressed and not self.done:
            host.drain()  # memory may be locked by backups still in flight: wait for them
            self.prefetch.cancel_all()  # and by the waiting requests' prefetches
            progressed = self._prefill_step() or self._decode_step()
        if not progressed and not self.done:
            raise SchedulerStalled(
                f"no progress: {len(self.running)} running, {len(self._ready)} ready, "
                f"free={self.cache.pools.kv_allocator.available_size()}, "
                f"evictable={self.cache.evictable_size()}"
            )
        self.num_steps += 1
        if self.config.check_invariants:
            self.check_invariants()
        self.listener.on_step(self)

    def _bulk_step(self) -> None:
        """A decode step run in bulk, counted and seen by the listener as one."""
        self.num_steps += 1
        self.listener.on_step(self)

    def check_invariants(self) -> None:
        self.cache.check_invariants(self.held_by_requests())
        self.num_invariant_checks += 1

    def held_by_requests(self) -> dict[str, int]:
        """Units per pool that running requests hold privately (see `held_by`)."""
        return held_by(self.running, self.cache.pools.mamba)

    def _free_out_of_window(self, request: RunningRequest) -> None:
        """After each prefill chunk and decode step: frees the request's SWA slots that left
        the window, and releases the window lock once the decode is past the cached prefix."""
        if not self._window_steps:
            return
        request.window_page = request.req.kv_committed_len // self.page_size
        self.cache.free_out_of_window_slots(request.req)
        if request.prefilled:
            self.cache.release_window_lock(request.req)

    def _prefill_step(self) -> bool:
        budget = self.config.chunk_size
        entries: list[ForwardEntry] = []
        if self.chunked is not None:
            entry = self._next_chunk(self.chunked, budget)
            if entry is None:
                return False
            entries.append(entry)
            budget -= entry.end - entry.start
        while self.chunked is None and budget > 0 and self._ready:
            if len(self.running) >= self.config.max_running:
                break
            entry = self._admit(heapq.heappop(self._ready), budget)
            if entry is None:
                break
            entries.append(entry)
            budget -= entry.end - entry.start
        if not entries:
            return False
        self.cache.host_tier.wait_loads()  # loaded-back prefixes must land before compute
        tokens = iter(self.runner.forward(ForwardBatch(False, entries)))
        self.checkpoints.commit_tracks(entries)
        for e in entries:
            self._after_prefill(e, next(tokens) if e.samples else None)
        return True

    def _next_chunk(self, request: RunningRequest, budget: int) -> ForwardEntry | None:
        """The next chunk of `request`'s prompt within `budget`, with its slots allocated;
        None when nothing fits. Sets or clears `self.chunked`."""
        start, prompt_len = request.req.kv_committed_len, request.prompt_len
        end = (
            prompt_len
            if prompt_len - start <= budget
            else start + budget // self.page_size * self.page_size
        )
        end = self.checkpoints.chunk_end(request, start, end)
        if end <= start or not self.slots.alloc(request, end):
            return None
        self.chunked = None if end == prompt_len else request
        track = self.checkpoints.track_seqlen(start, end)
        return ForwardEntry(request, start, end, end == prompt_len, track)

    def _admit(self, rid: int, budget: int) -> ForwardEntry | None:
        """Admits request `rid` with its first chunk; None (and `rid` back in the queue) when
        it does not fit."""
        cache, pools = self.cache, self.cache.pools
        row = pools.req_to_token_pool.alloc()
        if row is None:
            heapq.heappush(self._ready, rid)
            return None
        spec = self.specs[rid]
        previous = self._retracted.get(rid)
        if self._last_tried is None or self._last_tried[0] != rid:
            self._last_tried = (rid, *self._prompt_key(rid))
        _, tokens, key = self._last_tried
        req = Req(token_ids=tokens, req_pool_idx=row, session_id=spec.session_id)
        self.prefetch.take(rid, key)  # an L3 store: its pages join the host hit first
        match = cache.match_prefix(MatchPrefixParams(key, req=req))
        self.listener.on_match(rid, key, match)
        if pools.mamba is not None and req.mamba_pool_idx is None:
            self._decline(rid, req, row, prefetched=False)  # no Mamba slot to be had now: wait
            return None
        device_hit = match.device_prefix_len
        outputs_left = spec.output_len - (previous.num_output if previous else 0)
        if match.host_hit_length:
            match = self._load_back(match, outputs_left, len(tokens), req)
        elif self.slots.spare(self.running, len(tokens), device_hit, outputs_left) < 0:
            # Declined before locking: locking only moves evictable slots to protected, so
            # `spare` cannot grow under the lock, and a lock released unused changes nothing.
            # On a saturated server this is most admissions tried. The request holds only
            # its row and its Mamba slots (no lock, no KV slots yet).
            self._decline(rid, req, row, prefetched=True)
            return None
        req.lock = cache.inc_lock_ref(match.last_device_node)
        req.last_node = match.last_device_node
        hit = match.device_prefix_len
        req.cache_protected_len = req.kv_committed_len = req.kv_allocated_len = hit
        request = RunningRequest(spec, req, len(tokens), mamba_branch=match.mamba_branching_seqlen)
        request.host_hit_tokens = hit - device_hit
        if previous is not None:
            request.num_output = previous.num_output
            request.num_admissions = previous.num_admissions + 1
        # Full KV is what a request keeps whole; SWA slots are freed out of the window as the
        # request goes, so the SWA pool is checked chunk by chunk, not here.
        spare = self.slots.spare(self.running, len(tokens), hit, outputs_left)
        entry = None
        if spare >= 0:
            # The row and the checkpoints only once memory allows: on a saturated server most
            # admissions tried stop at `spare`, and a request dropped uncached reads neither.
            pools.req_to_token_pool.write(row, 0, match.device_indices)
            req.checkpoint_seqlens = self.checkpoints.seqlens(len(tokens), match)
            entry = self._next_chunk(request, budget)
        if entry is None:
            cache.cache_finished_req(req, is_insert=False)
            heapq.heappush(self._ready, rid)
            self.prefetch.declined(rid)
            return None
        self._retracted.pop(rid, None)
        self._last_tried = None  # admitted: its tokens now grow with its output
        request.host_hit_tokens = self.prefetch.admitted(
            rid, hit, request.host_hit_tokens, previous is None
        )
        self.running.append(request)
        self.listener.on_admit(request, match)
        return entry

    def _decline(self, rid: int, req: Req, row: int, prefetched: bool) -> None:
        """Request `rid` waits again: its row and Mamba slots go back (it holds nothing else)."""
        self.cache.release_req_slots(req)
        self.cache.pools.req_to_token_pool.free(row)
        heapq.heappush(self._ready, rid)
        if prefetched:
            self.prefetch.declined(rid)

    def _prompt_key(self, rid: int) -> tuple[Tokens, RadixKey]:
        """Request `rid`'s tokens to prefill (a retracted one's outputs too) and its key.
        The tokens are an `array("q")`: keys pack from it with one copy, not per token."""
        previous = self._retracted.get(rid)
        if previous:
            tokens = previous.req.token_ids
            return tokens, self.cache.make_key(tokens[:-1])
        prompt = np.ascontiguousarray(self.specs[rid].prompt.token_ids(), dtype=np.int64)
        # One copy each for the tokens and the key (a long prompt's copies cost page faults).
        tokens = array("q")
        tokens.frombytes(prompt.data.cast("B"))
        return tokens, self.cache.make_key(prompt[:-1])

    def abort(self, rid: int) -> None:
        """Drops request `rid` while it waits (not admitted yet): its L3 prefetch is
        released, and requests waiting on it run without it."""
        if rid not in self._ready:
            raise ValueError(f"abort: request {rid} is not waiting in the queue")
        self._ready.remove(rid)
        heapq.heapify(self._ready)
        self.prefetch.cancel(rid)
        self._retracted.pop(rid, None)
        self._finished[rid] = True
        for waiting in self._blocked.pop(rid, []):
            heapq.heappush(self._ready, waiting)

    def _load_back(
        self, match: MatchResult, outputs_left: int, prompt_len: int, req: Req
    ) -> MatchResult:
        """Loads the match's host hit back to the device when the whole request would fit
        (the loaded tokens are slots it would allocate anyway); otherwise `match`."""
        hit = match.device_prefix_len + match.host_hit_length
        spare = self.slots.spare(self.running, prompt_len, hit, outputs_left)
        return self.cache.host_tier.load_back(match, max(0, spare), req)

    def _after_prefill(self, entry: ForwardEntry, token: int | None) -> None:
        request = entry.request
        request.req.kv_committed_len = entry.end
        if self.checkpoints.free_before_publish and token is None:
            # A middle chunk's out-of-window SWA goes before the chunk is published, so the
            # tree receives its last window (and checkpoint windows), not the whole chunk
            # live. (After the last chunk the order stays: measured, the tree keeping that
            # chunk live serves the retries and branches of agent traffic better.)
            self.cache.free_out_of_window_slots(request.req)
        if token is None:
            self.cache.cache_unfinished_req(request.req, chunked=True)
            self._free_out_of_window(request)
            return
        request.prefilled = True
        self._append_output(request, token)
        if request.num_output < request.spec.output_len:
            self.cache.cache_unfinished_req(request.req)
            self._free_out_of_window(request)

    def _decode_step(self) -> bool:
        decoding = [r for r in self.running if r.prefilled]
        if not decoding:
            return False
        retracted = False
        while not self.slots.decode_fits(decoding):
            victim = min(decoding, key=lambda r: (r.num_output, -r.prompt_len))
            decoding.remove(victim)
            self._retract(victim)
            retracted = True
        entries = []
        # Without tracked Mamba states no entry tracks one: no call per request per token.
        track_seqlen = self.checkpoints.output_track_seqlen if self.checkpoints.tracks else None
        for r in decoding:
            position = len(r.req.token_ids) - 1
            # Rows hold whole pages: a new slot is needed once per page, so the call is skipped
            # while the position is already allocated (this runs per request per token).
            if position >= r.req.kv_allocated_len:
                ok = self.slots.alloc(r, position + 1)
                assert ok, "decode allocation failed after decode_fits"
            end = position + 1
            track = None if track_seqlen is None else track_seqlen(r, position, end)
            entries.append(ForwardEntry(r, position, end, True, track))
        if not entries:
            return retracted
        tokens = self.runner.forward(ForwardBatch(True, entries))
        self.checkpoints.commit_tracks(entries)
        page_size = self.page_size
        for e, token in zip(entries, tokens, strict=True):
            request = e.request
            request.req.kv_committed_len = e.end
            self._append_output(request, token)
            # Windowed components act on whole pages: what they read of a request (the page
            # floor of `kv_committed_len`, its cached length, checkpoints and cursor) changes
            # during decode only when a page fills, so the step within a page is a no-op.
            if (
                request.num_output < request.spec.output_len
                and e.end // page_size != request.window_page
            ):
                self._free_out_of_window(request)
        return True

    def _retract(self, request: RunningRequest) -> None:
        self.running.remove(request)
        saved = Req(token_ids=request.req.token_ids)
        self.cache.cache_finished_req(request.req, is_insert=False)
        request.req = saved
        request.prefilled = False
        self._retracted[request.spec.rid] = request
        heapq.heappush(self._ready, request.spec.rid)
        self.listener.on_retract(request)

    def _append_output(self, request: RunningRequest, token: int) -> None:
        request.req.token_ids.append(token)
        request.num_output += 1
        if request.num_output == request.spec.output_len:
            self._finish(request)

    def _finish(self, request: RunningRequest) -> None:
        self.cache.cache_finished_req(request.req)
        self.running.remove(request)
        rid = request.spec.rid
        self._finished[rid] = True
        for waiting in self._blocked.pop(rid, []):
            heapq.heappush(self._ready, waiting)
        self.listener.on_finish(request)
