"""One line on stderr (through `logging`, logger `uniradix.storage`) when L3 changes state.

A store that fails must not fail silently: a user who asked for L3 and does not get it is
told once when it first fails, and once at each change after that, each line naming the
store, the reason and what happens now:

- the first failure of a store (it is retried until the breaker opens);
- L3 turned off (the breaker opened), still failing at a probe, back on;
- backups paused because the store refused a write (a full Redis under `noeviction`).

A breaker's HALF_OPEN step has no line of its own: the probe's outcome follows at once and
says it. Without a logging configuration, Python's last-resort handler prints WARNING lines
to stderr as they are; an application's own configuration takes over when it has one.
"""

from __future__ import annotations

import logging
import re

from uniradix.storage.breaker import BreakerState

log = logging.getLogger("uniradix.storage")

_PASSWORD = re.compile(r"(://[^/@:]*:)[^/@]*@")


def redact(url: str) -> str:
    """`url` without its password (`redis://:secret@host` -> `redis://:***@host`)."""
    return _PASSWORD.sub(r"\1***@", url)


def first_failure(store: str, reason: str, threshold: int) -> None:
    log.warning(
        "uniradix: L3 store %s failed (%s); retrying, L3 turns off after %d failures in a row",
        store,
        reason,
        threshold,
    )


def transition(
    store: str, old: BreakerState, new: BreakerState, reason: str, wait_s: float, off_s: float
) -> None:
    if new is BreakerState.OPEN and old is BreakerState.CLOSED:
        log.warning(
            "uniradix: L3 store %s is off (%s); requests go on without it, next try in %.1f s",
            store,
            reason,
            wait_s,
        )
    elif new is BreakerState.OPEN:
        log.warning(
            "uniradix: L3 store %s still fails (%s); off, next try in %.1f s",
            store,
            reason,
            wait_s,
        )
    elif new is BreakerState.CLOSED:
        log.warning("uniradix: L3 store %s is back on after %.1f s off in all", store, off_s)


def writes_paused(store: str, reason: str, pause_s: float) -> None:
    log.warning(
        "uniradix: L3 store %s refused a write (%s); backups paused for %.1f s, reads go on",
        store,
        reason,
        pause_s,
    )
