"""A circuit breaker: turns L3 off after repeated failures, and probes it back on.

```
          N consecutive failures                 cool-down elapsed
 CLOSED ─────────────────────────> OPEN ───────────────────────────> HALF_OPEN
   ^  every call goes to the store     every call is refused             one call (the probe)
   │                                   at once (a counted miss)          goes to the store
   └──────────── probe succeeded ─────────────────────────────────────────┘
                 probe failed: back to OPEN, the cool-down doubles (up to `max_cooldown_s`)
```

A store that is down costs each caller at most one bounded timeout until the breaker opens,
then nothing: refused calls return at once, and `available()` lets a caller skip the work
of preparing a call that would be refused. The doubling cool-down keeps a store that stays
down from costing a failed probe every second. `StorageBackend` guards every store
operation with one breaker, so this holds for every backend. `off_s` is how long L3 has been
off (not CLOSED) in all; `on_change` hears every transition. Thread-safe.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable

MAX_COOLDOWN_S = 30.0  # the longest wait between two probes of a store that stays down


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


Transition = Callable[[BreakerState, BreakerState, float], None]
"""`on_change(old, new, cooldown_s)`: called outside the breaker's lock; `cooldown_s` is the
wait before the next probe (meaningful when `new` is OPEN)."""


class CircuitBreaker:
    """`allow()` before a store call, then `record_success()` or `record_failure()`.

    `failure_threshold` consecutive failures open the breaker; after `cooldown_s` the next
    `allow()` lets one probe through (others are still refused until it reports); each
    failed probe doubles the cool-down, up to `max_cooldown_s` (default `MAX_COOLDOWN_S`, or
    `cooldown_s` when longer). A store that fails again
    within `max_cooldown_s` of coming back (reads work, writes do not: a read-only directory)
    is the same outage: the cool-down keeps doubling instead of starting over.
    """

    def __init__(
        self,
        failure_threshold: int = 3,
        cooldown_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        max_cooldown_s: float | None = None,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1, got {failure_threshold}")
        if cooldown_s < 0:
            raise ValueError(f"cooldown_s must be >= 0, got {cooldown_s}")
        if max_cooldown_s is None:
            max_cooldown_s = max(cooldown_s, MAX_COOLDOWN_S)
        if max_cooldown_s < cooldown_s:
            raise ValueError(f"max_cooldown_s must be >= cooldown_s, got {max_cooldown_s}")
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._off_since = 0.0
        self._closed_at = -max_cooldown_s
        self._off_total = 0.0
        self._wait_s = cooldown_s
        self._probe_in_flight = False
        self.trips = 0
        self.on_change: Transition | None = None

    @property
    def state(self) -> BreakerState:
        with self._lock:
            return self._state

    @property
    def off_s(self) -> float:
        """Seconds L3 has been off (OPEN or HALF_OPEN) since the breaker was made."""
        with self._lock:
            if self._state is BreakerState.CLOSED:
                return self._off_total
            return self._off_total + self._clock() - self._off_since

    def available(self) -> bool:
        """Whether `allow()` would let a call through now (changes nothing)."""
        with self._lock:
            if self._state is BreakerState.CLOSED:
                return True
            if self._state is BreakerState.OPEN:
                return self._clock() - self._opened_at >= self._wait_s
            return not self._probe_in_flight

    def allow(self) -> bool:
        with self._lock:
            old = self._state
            if old is BreakerState.CLOSED:
                return True
            if old is BreakerState.OPEN:
                if self._clock() - self._opened_at < self._wait_s:
                    return False
                self._state = BreakerState.HALF_OPEN
                self._probe_in_flight = False
            if self._probe_in_flight:
                return False
            self._probe_in_flight = True
        self._tell(old, BreakerState.HALF_OPEN)
        return True

    def record_success(self) -> None:
        with self._lock:
            old = self._state
            if old is not BreakerState.CLOSED:
                self._closed_at = self._clock()
                self._off_total += self._closed_at - self._off_since
            self._state = BreakerState.CLOSED
            self._failures = 0
            self._probe_in_flight = False
        self._tell(old, BreakerState.CLOSED)

    def record_failure(self) -> None:
        with self._lock:
            old = self._state
            self._failures += 1
            self._probe_in_flight = False
            if old is BreakerState.HALF_OPEN:
                # A failed probe keeps L3 off (not a new trip) and waits twice as long.
                self._wait_s = min(self._wait_s * 2, self.max_cooldown_s)
            elif old is BreakerState.CLOSED and self._failures >= self.failure_threshold:
                self.trips += 1  # `trips` counts CLOSED -> OPEN only
                self._off_since = now = self._clock()
                flapping = now - self._closed_at < self.max_cooldown_s
                self._wait_s = (
                    min(self._wait_s * 2, self.max_cooldown_s) if flapping else self.cooldown_s
                )
            if old is BreakerState.HALF_OPEN or self._failures >= self.failure_threshold:
                self._state = BreakerState.OPEN
                self._opened_at = self._clock()
            new = self._state
        self._tell(old, new)

    def _tell(self, old: BreakerState, new: BreakerState) -> None:
        if old is not new and self.on_change is not None:
            self.on_change(old, new, self._wait_s)
