"""`bench_events ops --before REV` loads that revision's recorder with its own `packed`
module beside the current ones: its steps give the same events as today's recorder."""

from __future__ import annotations

import subprocess

import pytest

from benchmarks.events_ops import _before_recorder
from tests.helpers import insert_fresh, make_cache
from uniradix import EvictParams
from uniradix.events.recorder import EventRecorder
from uniradix.events.wire import encode_batch


def test_the_recorder_of_a_revision_runs_beside_the_current_one() -> None:
    try:
        before = _before_recorder("HEAD")
    except (subprocess.CalledProcessError, FileNotFoundError):
        pytest.skip("not a git checkout")
    assert before is not EventRecorder and before.__module__ != EventRecorder.__module__
    steps = []
    for cls in (before, EventRecorder):
        cache = make_cache(full_tokens=64, page_size=2)
        recorder = cls(cache)
        cache.set_event_sink(recorder)
        insert_fresh(cache, [1, 2, 3, 4, 5, 6])
        insert_fresh(cache, [1, 2, 7, 8])  # splits the first leaf
        cache.evict(EvictParams(num_tokens=2))
        step = recorder.take_step()
        steps.append((list(step), encode_batch(step, 0.0, 0, "map")))
    assert steps[0] == steps[1] and len(steps[0][0]) == 3  # two stores, a remove
