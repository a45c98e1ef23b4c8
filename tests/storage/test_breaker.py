import pytest

from uniradix.storage import BreakerState, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_opens_after_consecutive_failures_and_probes_after_cooldown() -> None:
    clock = Clock()
    b = CircuitBreaker(failure_threshold=3, cooldown_s=2.0, clock=clock)
    for _ in range(2):
        assert b.allow()
        b.record_failure()
    assert b.allow()
    b.record_success()  # a success resets the count
    for _ in range(3):
        assert b.allow()
        b.record_failure()
    assert b.state is BreakerState.OPEN and b.trips == 1
    assert not b.allow()
    clock.now = 1.9
    assert not b.allow()
    clock.now = 2.0
    assert b.allow()  # the probe
    assert b.state is BreakerState.HALF_OPEN
    assert not b.allow()  # one probe at a time
    b.record_failure()  # failed probe: off again, cool-down doubles, not a new trip
    assert b.state is BreakerState.OPEN and b.trips == 1
    clock.now = 5.9
    assert not b.allow() and not b.available()
    clock.now = 6.0
    assert b.available()
    assert b.allow()
    b.record_success()
    assert b.state is BreakerState.CLOSED and b.allow()
    assert b.off_s == 6.0
    for _ in range(3):
        b.record_failure()
    assert b.trips == 2


@pytest.mark.parametrize(("threshold", "cooldown"), [(0, 1.0), (1, -1.0)])
def test_bad_settings_raise(threshold: int, cooldown: float) -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(threshold, cooldown)
