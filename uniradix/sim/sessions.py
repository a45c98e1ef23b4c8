"""Session bookkeeping of a replay: opens a session at its first admission, releases it when
its last request finished, and measures follow-up turns apart from everything else.

A *follow-up* is a request whose `session_id` an earlier request (in arrival order) carried:
the turns that the session cache exists for. Every other request (a session's first turn,
one-off traffic) is *other*. Both are counted at first admission, as `ReplayMetrics` does.

`SessionListener` wraps the replay's listener and passes every event on, so the scheduler
sees one listener. Without the session cache (`cache.sessions.enabled` false) it opens and
releases nothing but measures the same split, so runs with and without sessions compare.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.key import RadixKey
from uniradix.sim.batch import RunningRequest, SchedulerListener, SchedulerView
from uniradix.sim.request_spec import RequestSpec
from uniradix.types import EvictResult, MatchResult


def followup_rids(specs: list[RequestSpec]) -> set[int]:
    """Rids of requests whose session an earlier request opened."""
    seen: set[str] = set()
    out = set()
    for spec in specs:
        sid = spec.session_id
        if sid is None:
            continue
        if sid in seen:
            out.add(spec.rid)
        seen.add(sid)
    return out


class SessionListener:
    def __init__(
        self, cache: UnifiedRadixCache, specs: list[RequestSpec], inner: SchedulerListener
    ) -> None:
        self.cache = cache
        self.inner = inner
        self.followups = followup_rids(specs)
        self.remaining = Counter(s.session_id for s in specs if s.session_id is not None)
        self.prompt_tokens = {"followup": 0, "other": 0}
        self.hit_tokens = {"followup": 0, "other": 0}
        self.ideal_hit_tokens = {"followup": 0, "other": 0}

    def set_ideal(self, specs: list[RequestSpec], ideal: list[int]) -> None:
        """The unbounded cache's hits per request (`uniradix.sim.ideal`), split the same way."""
        for spec, hit in zip(specs, ideal, strict=True):
            self.ideal_hit_tokens[self._kind(spec.rid)] += hit

    def _kind(self, rid: int) -> str:
        return "followup" if rid in self.followups else "other"

    def on_match(self, rid: int, key: RadixKey, match: MatchResult) -> None:
        self.inner.on_match(rid, key, match)

    def on_admit(self, request: RunningRequest, match: MatchResult) -> None:
        self.inner.on_admit(request, match)
        if request.num_admissions > 1:
            return
        kind = self._kind(request.spec.rid)
        self.prompt_tokens[kind] += request.prompt_len
        self.hit_tokens[kind] += match.device_prefix_len
        sid = request.spec.session_id
        if sid is not None and self.cache.sessions.enabled:
            self.cache.open_session(sid)

    def on_finish(self, request: RunningRequest) -> None:
        self.inner.on_finish(request)
        sid = request.spec.session_id
        if sid is None:
            return
        self.remaining[sid] -= 1
        if self.remaining[sid] == 0:
            self.cache.release_session(sid)

    def on_evict(self, result: EvictResult) -> None:
        self.inner.on_evict(result)

    def on_retract(self, request: RunningRequest) -> None:
        self.inner.on_retract(request)

    def on_step(self, scheduler: SchedulerView) -> None:
        self.inner.on_step(scheduler)

    def summary(self) -> dict[str, Any]:
        """`session_followup_hit_rate`, the other requests' hit rate, the unbounded cache's
        for both, and the session cache's counters."""
        out: dict[str, Any] = {}
        for kind, name in (("followup", "session_followup"), ("other", "other")):
            prompt = max(self.prompt_tokens[kind], 1)
            out[f"{name}_prompt_tokens"] = self.prompt_tokens[kind]
            out[f"{name}_hit_rate"] = self.hit_tokens[kind] / prompt
            out[f"{name}_ideal_hit_rate"] = self.ideal_hit_tokens[kind] / prompt
        stats = self.cache.sessions.stats()
        out["sessions"] = {
            "enabled": self.cache.sessions.enabled,
            "opened": stats.opened,
            "released": stats.released,
            "evicted_while_covered": stats.evicted_while_covered,
            "registered_turns": stats.registered_turns,
            "ignored_late_turns": stats.ignored_late_turns,
        }
        return out
