"""Random traffic with sessions opened and released at random, on every config: every pool's
invariants (the session coverage's included) after every step, and nothing leaked."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sim.specs import small_cache
from uniradix import EvictParams
from uniradix.cache.controller import UnifiedRadixCache
from uniradix.sessions import SessionCache
from uniradix.sim.batch import RunningRequest
from uniradix.sim.replay import NullRunner
from uniradix.sim.request_spec import RequestSpec, TokenPrompt
from uniradix.sim.scheduler import Scheduler, SchedulerConfig
from uniradix.types import MatchResult


class RandomSessions:
    """On each admission or finish, takes the next drawn action: 0 nothing, 1 open the
    request's session, 2 release it, 3 release another session."""

    def __init__(self, cache: UnifiedRadixCache, actions: list[int]) -> None:
        self.cache, self.actions, self.i = cache, actions, 0

    def _act(self, request: RunningRequest) -> None:
        action = self.actions[self.i % len(self.actions)]
        self.i += 1
        sid = request.spec.session_id
        assert sid is not None
        if action == 1:
            self.cache.open_session(sid)
        elif action == 2:
            self.cache.release_session(sid)
        elif action == 3:
            self.cache.release_session(f"s{(int(sid[1:]) + 1) % 3}")

    def on_match(self, rid: int, key: object, match: MatchResult) -> None:
        return

    def on_admit(self, request: RunningRequest, match: MatchResult) -> None:
        self._act(request)

    def on_finish(self, request: RunningRequest) -> None:
        self._act(request)

    def on_evict(self, result: object) -> None:
        return

    def on_retract(self, request: RunningRequest) -> None:
        return

    def on_step(self, scheduler: Scheduler) -> None:
        return


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=st.sampled_from(["full", "swa", "mamba", "hybrid"]),
    turns=st.lists(
        st.tuples(st.integers(0, 2), st.lists(st.integers(0, 3), min_size=1, max_size=12)),
        min_size=1,
        max_size=10,
    ),
    outputs=st.lists(st.integers(1, 8), min_size=10, max_size=10),
    page_size=st.sampled_from([1, 2]),
    full_pages=st.integers(24, 48),
    window=st.integers(1, 6),
    actions=st.lists(st.integers(0, 3), min_size=1, max_size=20),
    closed_memory=st.integers(0, 2),
)
def test_random_sessions_keep_every_pool_exact(  # type: ignore[no-untyped-def]
    config, turns, outputs, page_size, full_pages, window, actions, closed_memory
) -> None:
    full_tokens = full_pages * page_size
    cache = small_cache(config, full_tokens, page_size, window, 12, enable_session_cache=True)
    assert isinstance(cache.sessions, SessionCache)
    cache.sessions.closed_memory = closed_memory
    # Each session's turn extends its previous turn's prompt and answer, as a chat does.
    contexts: dict[int, list[int]] = {}
    last: dict[int, int] = {}
    specs: list[RequestSpec] = []
    for (session, message), n in zip(turns, outputs, strict=False):
        prompt = contexts.get(session, [9, 9]) + message
        if len(prompt) + n > full_tokens // 2:
            continue
        rid = len(specs)
        out = np.full(n, 5 + session, dtype=np.int64)
        specs.append(
            RequestSpec(rid, TokenPrompt(prompt), out, rid, last.get(session), f"s{session}")
        )
        contexts[session] = prompt + out.tolist()
        last[session] = rid
    if not specs:
        return
    scheduler = Scheduler(
        cache,
        NullRunner(),
        specs,
        SchedulerConfig(2, 2 * page_size, 0.0, check_invariants=True),
        RandomSessions(cache, actions),
    )
    scheduler.run()
    assert scheduler.num_invariant_checks == scheduler.num_steps
    for sid in ("s0", "s1", "s2"):
        cache.release_session(sid)
    cache.check_invariants({"full": 0, "swa": 0, "mamba": 0, "req": 0})
    cache.evict(EvictParams(num_tokens=full_tokens, swa_num_tokens=full_tokens, mamba_num=12))
    cache.check_invariants({"full": 0, "swa": 0, "mamba": 0, "req": 0})
    assert cache.pools.available() == cache.pools.capacities()
    assert cache.sessions.stats().covered_nodes == 0
