"""Sessions: keeping a multi-turn conversation's or an agent's context warm between turns.

`SessionCache` (coverage: a finished turn's context is evicted last) and `NullSessions` (the
cache without sessions); `StreamingSessions` keeps a finished turn's KV row for the next turn.
"""

from uniradix.cache.sessions import NullSessions, SessionCache, SessionRelease, SessionStats
from uniradix.sessions.streaming import StreamingSessions

__all__ = ["NullSessions", "SessionCache", "SessionRelease", "SessionStats", "StreamingSessions"]
