"""The ZMQ sender thread hashes each step's pages (`PageDigests` cells) while the scheduler's
thread goes on splitting, evicting and storing the nodes they came from: random traffic
over a real socket, every batch replayed from the publisher and applied in order under the
stream's contract, ends equal to the cache's content hashed independently from its
tokens."""

from __future__ import annotations

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.events.oracle import StrictStream, cached_hashes
from tests.events.zmq_helpers import loopback_publisher, published
from tests.sim.specs import fitting_specs, small_cache
from uniradix.events import KVEventBatch
from uniradix.events.stream import KVEventStream
from uniradix.sim.batch import NullListener
from uniradix.sim.replay import NullRunner
from uniradix.sim.scheduler import Scheduler, SchedulerConfig


class FlushEachStep(NullListener):
    def __init__(self, stream: KVEventStream) -> None:
        self.stream = stream

    def on_step(self, scheduler: Scheduler) -> None:
        self.stream.flush()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=st.sampled_from(["full", "hybrid"]),
    prompts=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=60), min_size=2, max_size=10),
    outputs=st.lists(st.integers(1, 12), min_size=10, max_size=10),
    page_size=st.sampled_from([1, 4]),
    max_running=st.integers(1, 3),
)
def test_sender_hashes_while_the_cache_changes(  # type: ignore[no-untyped-def]
    config, prompts, outputs, page_size, max_running
) -> None:
    full_tokens = 40 * page_size
    cache = small_cache(config, full_tokens, page_size, 4, 12)
    # No wait: the sender hashes a step's cells while the next steps run.
    stream = KVEventStream(cache, [loopback_publisher(sender_wait_ms=0.0)], publish_interval_ms=0)
    try:
        specs = fitting_specs(prompts, outputs, full_tokens // 2)
        config_ = SchedulerConfig(max_running, 2 * page_size, 0.0, check_invariants=True)
        Scheduler(cache, NullRunner(), specs, config_, FlushEachStep(stream)).run()
        stream.flush()
        batches = published(stream.publishers[0])  # type: ignore[arg-type]
    finally:
        stream.close()
    assert [seq for _, seq, _ in batches] == list(range(len(batches)))
    decoder = msgspec.msgpack.Decoder(KVEventBatch)
    strict = StrictStream(page_size)
    for _, _, payload in batches:
        strict.apply(decoder.decode(payload).events)
    assert set(strict.parent) == cached_hashes(cache)
    assert stream.recorder.digests.pages_hashed > 0
