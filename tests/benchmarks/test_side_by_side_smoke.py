"""Smoke tests of the benchmark's stream generator and uniradix driver (no timings asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.ops import measure, play
from benchmarks.report import render
from benchmarks.streams import MOONCAKE_BLOCK_TOKENS, StreamDigest, StreamSpec, requests
from benchmarks.uniradix_side import ADAPTERS


def _digest(spec: StreamSpec) -> str:
    digest = StreamDigest()
    for r in requests(spec):
        digest.update(r)
    return digest.hexdigest()


def test_streams_are_deterministic_and_seeded() -> None:
    spec = StreamSpec("fewshot", seed=3, scale=0.05)
    assert _digest(spec) == _digest(spec)
    assert _digest(spec) != _digest(StreamSpec("fewshot", seed=4, scale=0.05))


def test_chat_turn_extends_the_previous_turn_of_its_conversation() -> None:
    reqs = list(requests(StreamSpec("chat", scale=0.01)))
    assert len(reqs) == 2 * 5
    system = reqs[0].tokens[:1000]
    assert all(r.tokens[:1000] == system for r in reqs)
    later = reqs[2:4]
    for first in reqs[:2]:
        assert sum(r.tokens[: len(first.tokens)] == first.tokens for r in later) == 1
    assert all(80 <= len(r.tokens) - r.prompt_len <= 120 for r in reqs)


def test_mooncake_blocks_map_to_tokens(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [0, 1]},
        {"timestamp": 1, "input_length": 512, "output_length": 1, "hash_ids": [0]},
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows))
    a, b = requests(StreamSpec("mooncake", trace_path=str(trace)))
    assert a.prompt_len == 600 and len(a.tokens) == 602
    assert a.tokens[:600] == list(range(600))
    assert b.tokens[:512] == a.tokens[:MOONCAKE_BLOCK_TOKENS]
    assert b.tokens[512] not in a.tokens


def test_bad_workload_is_rejected() -> None:
    with pytest.raises(ValueError, match="nope"):
        requests(StreamSpec("nope"))


@pytest.mark.parametrize("page_size", [1, 16])
def test_uniradix_driver_plays_a_stream_with_eviction(page_size: int) -> None:
    spec = StreamSpec("chat", scale=0.05)
    out = play(ADAPTERS["full"](page_size, 4096), requests(spec))  # play checks invariants
    assert out["requests"] == 50 and out["failed"] == 0
    assert out["ops"]["evict"]["count"] > 0
    assert out["ops"]["insert"]["count"] == 50
    assert 0.3 < out["hit_rate"] < 1.0
    assert 0 < out["cached_tokens"] <= 4096
    assert out["stream_digest"] == _digest(spec)


def test_measure_and_report_render_a_table() -> None:
    spec = StreamSpec("random", scale=0.01)
    side = measure(lambda: ADAPTERS["full"](1, 2048), lambda: requests(spec))
    assert side["heap_bytes_per_cached_token"] > 0
    job = {"part": "streams", "config": "full", "page_size": 1, "pool_tokens": 2048}
    doc = {
        "command": "x",
        "machine": {"platform": "p", "python": "3"},
        "results": [{"job": {**job, "stream": spec.to_dict()}, "sides": {"uniradix": side}}],
    }
    table = render(doc)
    assert "| full | random | 1 | uniradix |" in table
    assert "identical request stream (SHA-256 digests): yes" in table


def test_long_streams_have_the_documented_prompt_lengths() -> None:
    chat = list(requests(StreamSpec("longchat", scale=0.02)))
    assert len(chat) == 4 * 5
    assert all(1080 <= r.prompt_len <= 2200 for r in chat)
    assert max(r.prompt_len for r in chat) > 1800  # the last turns carry the whole history
    docs = list(requests(StreamSpec("longdoc", scale=0.125)))
    assert len(docs) == 2 * 6
    assert all(8192 + 50 <= r.prompt_len <= 32768 + 150 for r in docs)
    assert len({tuple(r.tokens[:8192]) for r in docs}) == 2  # six questions per document


@pytest.mark.parametrize("config", ["full", "full+swa", "full+mamba"])
def test_batched_play_frees_the_duplicates_of_a_batch(config: str) -> None:
    """Requests of one batch match before any of them inserts: the second conversation of a
    batch re-inserts the system prompt the first one just cached, and the cache frees those
    slots (play checks invariants and the adapter's pools are whole at the end)."""
    spec = StreamSpec("longchat", scale=0.02, batch=4)
    adapter = ADAPTERS[config](16, 1 << 14)
    batched = play(adapter, requests(spec), batch=4)
    single = play(ADAPTERS[config](16, 1 << 14), requests(spec))
    assert batched["requests"] == single["requests"] == 20
    assert batched["failed"] == 0
    assert batched["hit_rate"] <= single["hit_rate"]  # batch-mates cannot hit each other
    free = adapter.cache.pools.available()["full"]
    assert free + adapter.cache.total_size() == adapter.cache.pools.capacities()["full"]


def test_scale_reports_bookkeeping_bytes_per_token() -> None:
    from benchmarks.scale import run_scale

    job = {"sizes": [12_000], "key_lens": [64], "queries": 3}
    out = run_scale(lambda size: ADAPTERS["full"](1, size), job)
    (row,) = out["rows"]
    assert row["tree_tokens"] >= 12_000 - 256
    # nodes, packed keys (8 B/token) and slot arrays (8 B/token) are all on the Python heap
    assert 16 <= row["heap_bytes_per_token"] < 200
    assert "rss_bytes_per_token" in row
