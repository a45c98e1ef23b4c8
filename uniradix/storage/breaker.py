"""A circuit breaker: turns L3 off after repeated failures, and probes it back on.

```
          N consecutive failures                 cool-down elapsed
 CLOSED ─────────────────────────> OPEN ───────────────────────────> HALF_OPEN
   ^  every call goes to the store     every call is refused             one call (the probe)
   │                                   at once (a counted miss)          goes to the store
   └──────────── probe succeeded ─────────────────────────────────────────┘
                 probe failed: back to OPEN, cool-down restarts
```

A store that is down costs each caller at most one bounded timeout until the breaker opens,
then nothing: refused calls return at once. `StorageBackend` guards every store operation
with one breaker, so this holds for every backend. Thread-safe.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """`allow()` before a store call, then `record_success()` or `record_failure()`.

    `failure_threshold` consecutive failures open the breaker; after `cooldown_s` the next
    `allow()` lets one probe through (others are still refused until it reports).
    """

    def __init__(
        self,
        failure_threshold: int = 3,
        cooldown_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1, got {failure_threshold}")
        if cooldown_s < 0:
            raise ValueError(f"cooldown_s must be >= 0, got {cooldown_s}")
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probe_in_flight = False
        self.trips = 0

    @property
    def state(self) -> BreakerState:
        with self._lock:
            return self._state

    def allow(self) -> bool:
        with self._lock:
            if self._state is BreakerState.CLOSED:
                return True
            if self._state is BreakerState.OPEN:
                if self._clock() - self._opened_at < self.cooldown_s:
                    return False
                self._state = BreakerState.HALF_OPEN
                self._probe_in_flight = False
            if self._probe_in_flight:
                return False
            self._probe_in_flight = True
            return True

    def record_success(self) -> None:
        with self._lock:
            self._state = BreakerState.CLOSED
            self._failures = 0
            self._probe_in_flight = False

    def record_failure(self) -> None:
        with self._lock:
            self._failures += 1
            self._probe_in_flight = False
            # `trips` counts CLOSED -> OPEN only: a failed probe keeps L3 off, it does not
            # trip it again.
            if self._state is BreakerState.CLOSED and self._failures >= self.failure_threshold:
                self.trips += 1
            if self._state is BreakerState.HALF_OPEN or self._failures >= self.failure_threshold:
                self._state = BreakerState.OPEN
                self._opened_at = self._clock()
