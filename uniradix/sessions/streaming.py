"""StreamingSessions: a session keeps its finished turn's KV row for the next turn.

A streaming client (a voice agent, a tool loop on one connection) sends its next turn as the
previous one plus new tokens. Publishing the finished turn and re-matching it costs a tree
insert and a match; instead the session *holds* the request: its row, its lock on the prefix
it matched, its lengths, its SWA cursor and its Mamba slots, exactly as a running request
holds them. The next turn resumes it and computes only the new tokens.

Row of a held turn (the request's own layout, `uniradix.cache.request_caching`)::

    [0, cache_protected_len)               the tree's slots, alive through `req.lock`
    [cache_protected_len, kv_committed_len) the turn's own computed KV, kept
    [page_ceil(kv_committed_len), ...)      overshoot (pages allocated past what was
                                            computed, e.g. speculative decode): freed at hold

`release_session` frees the held turn exactly once (its own slots, SWA included only where
still live, the lock, the row, the Mamba slots) and drops the session's coverage; releasing
again frees nothing. Held slots are the session's, not the tree's: `held_by_requests()` gives
them to `check_invariants`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from uniradix.cache.sessions import SessionRelease
from uniradix.types import Req

if TYPE_CHECKING:
    from uniradix.cache.controller import UnifiedRadixCache


class StreamingSessions:
    def __init__(self, cache: UnifiedRadixCache) -> None:
        self.cache = cache
        self._held: dict[str, Req] = {}
        self.trimmed_tokens = 0

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._held

    def hold(self, req: Req) -> None:
        """Keeps the finished `req` (instead of `cache_finished_req`) for its session's next
        turn, after freeing the overshoot: pages past `kv_committed_len` (capped at the token
        count). Raises ValueError without `req.session_id`, or if its session holds a turn."""
        sid = req.session_id
        if sid is None:
            raise ValueError("hold: the request has no session_id")
        if sid in self._held:
            raise ValueError(f"hold: session {sid!r} already holds a turn")
        if req.req_pool_idx is None:
            raise ValueError("hold: request has no req_pool_idx (never admitted or finished)")
        if not 0 <= req.cache_protected_len <= req.kv_committed_len <= req.kv_allocated_len:
            raise ValueError(
                f"hold: lengths {req.cache_protected_len} <= {req.kv_committed_len} <= "
                f"{req.kv_allocated_len} do not hold"
            )
        ps = self.cache.page_size
        end = min(req.kv_committed_len, len(req.token_ids))
        keep = -(-end // ps) * ps
        if keep < req.kv_allocated_len:
            rows = self.cache.pools.req_to_token_pool
            tail = rows.read(req.req_pool_idx, keep, req.kv_allocated_len)
            self.cache.pools.kv_allocator.free(tail)
            self.trimmed_tokens += req.kv_allocated_len - keep
            req.kv_allocated_len = keep
        req.kv_committed_len = end
        req.swa_evicted_seqlen = min(req.swa_evicted_seqlen, end - end % ps)
        self._held[sid] = req

    def resume(self, session_id: str, token_ids: list[int]) -> Req | None:
        """The held turn continued with `token_ids` (the previous tokens plus the new turn's):
        the caller computes `token_ids[kv_committed_len:]` into its row, as for any running
        request. None when nothing is held; a held turn that `token_ids` does not extend is
        released first (the caller then matches as usual)."""
        req = self._held.get(session_id)
        if req is None:
            return None
        done = req.kv_committed_len
        if list(token_ids[:done]) != list(req.token_ids[:done]) or len(token_ids) <= done:
            self._free(session_id)
            return None
        del self._held[session_id]
        req.token_ids = list(token_ids)
        return req

    def release_session(self, session_id: str) -> SessionRelease:
        """Frees the held turn (once) and drops the session's coverage."""
        freed = self._free(session_id)
        return replace(self.cache.release_session(session_id), streaming_tokens=freed)

    def _free(self, session_id: str) -> int:
        req = self._held.pop(session_id, None)
        if req is None:
            return 0
        own = req.kv_allocated_len - req.cache_protected_len
        self.cache.cache_finished_req(req, is_insert=False)
        return own

    def held_by_requests(self) -> dict[str, int]:
        """Units the held turns keep out of the tree, per pool (for `check_invariants`)."""
        held = {"full": 0, "swa": 0, "mamba": 0, "req": len(self._held)}
        mamba = self.cache.pools.mamba
        for req in self._held.values():
            held["full"] += req.kv_allocated_len - req.cache_protected_len
            held["swa"] += req.kv_allocated_len - max(
                req.cache_protected_len, req.swa_evicted_seqlen
            )
            if mamba is not None:
                held["mamba"] += len(mamba.held_slots(req))
        return held
