"""The L3 store under the host tier on a real Redis server: a second cache (its own
connection) hits what the first wrote through the replayer, and nothing leaks."""

from __future__ import annotations

from tests.storage.conftest import RedisServer
from uniradix.sim.replay import ReplayOptions, run_replay
from uniradix.storage import open_backend


def _options(**kw: object) -> ReplayOptions:
    return ReplayOptions.of(
        workload="long_doc_qa",
        config="full",
        full_tokens=12_000,
        host_tokens=24_000,
        page_size=16,
        max_requests=8,
        check_invariants=True,
        **kw,  # type: ignore[arg-type]
    )


def test_redis_store_serves_a_second_cache(redis_server: RedisServer) -> None:
    backend = open_backend(redis_server.url)
    backend.clear()
    first = run_replay(_options(storage_backend=backend)).summary
    assert first["storage"]["pages_written"] > 0
    second = run_replay(_options(storage_url=redis_server.url)).summary
    assert second["hit_tokens_by_tier"]["storage"] > 0
    assert second["storage"]["pages_read"] > 0
    assert not any(second["leaked"].values()) and not any(first["leaked"].values())
    backend.clear()
    backend.close()
