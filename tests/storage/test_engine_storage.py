"""Real KV bytes through L3: the tiny engine backs its host pages up to the store, and a
second engine (a new cache, a new connection, as a second process would have) on the same
directory or the same real Redis server hits what the first wrote and generates exactly
what the no-cache run does. Corrupt pages (a flipped bit, a truncated file, a wrong length,
a stale format version) are counted misses and the outputs stay equal."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.engine.test_engine_equal_output import (
    MAX_NEW_TOKENS,
    assert_equal_to_no_cache,
    engine_config,
    model_for,
    shared_prompts,
)
from tests.storage.conftest import RedisServer
from uniradix.engine.engine import Engine, GenerateResult
from uniradix.engine.model import TinyHybridModel
from uniradix.storage import open_backend
from uniradix.storage.file_segments import MAGIC, Reader, blob_of, frame_head, scan
from uniradix.storage.page_format import HEADER_BYTES
from uniradix.tiers.controller import HostTier
from uniradix.tiers.storage_tier import StorageTier

PAGE = 4


def _generate(
    model: TinyHybridModel, url: str, prompts: list[list[int]], **kw: object
) -> tuple[GenerateResult, StorageTier]:
    config = engine_config(
        "full",
        PAGE,
        full_tokens=64,
        host_tokens=256,
        storage_url=url,
        prefetch_threshold=PAGE,
        **kw,
    )
    engine = Engine(model, config)
    result = engine.generate(prompts, MAX_NEW_TOKENS)
    tier = engine.cache.host_tier
    assert isinstance(tier, HostTier) and tier.storage is not None
    engine.cache.check_invariants()
    tier.close()
    return result, tier.storage


def _second_process_hits(model: TinyHybridModel, url: str) -> StorageTier:
    prompts = shared_prompts()
    first, written = _generate(model, url, prompts)
    assert_equal_to_no_cache(model, prompts, first)
    assert written.stats.stored_pages > 0
    assert written.backend.stats().bytes_written >= written.stats.stored_pages * (
        written.page_nbytes
    )
    second, read = _generate(model, url, prompts)
    assert_equal_to_no_cache(model, prompts, second)
    assert read.stats.hit_tokens > 0  # the first prompt's prefix comes from L3 at once
    assert read.backend.stats().pages_read > 0
    assert second.hit_lengths[0] > 0 and first.hit_lengths[0] == 0
    return read


def test_a_second_cache_on_the_same_directory_hits_with_equal_outputs(
    tmp_path: Path, device: str
) -> None:
    model = model_for("full", device)
    _second_process_hits(model, f"file://{tmp_path / 'l3'}")


def test_a_second_cache_on_the_same_redis_hits_with_equal_outputs(
    redis_server: RedisServer, device: str
) -> None:
    store = open_backend(redis_server.url)
    store.clear()
    model = model_for("full", device)
    _second_process_hits(model, redis_server.url)
    store.clear()
    store.close()


def test_another_model_shape_reads_nothing(tmp_path: Path, device: str) -> None:
    url = f"file://{tmp_path / 'l3'}"
    prompts = shared_prompts()
    _generate(model_for("full", device), url, prompts)
    other = model_for("full", device, num_kv_heads=1)  # same fingerprint, other shape
    result, _ = _generate(other, url, prompts)
    assert result.hit_lengths[0] == 0  # none of the first model's pages (later ones: its own)
    assert_equal_to_no_cache(other, prompts, result)


def _flip_bit(page: bytes) -> bytes:
    data = bytearray(page)
    data[HEADER_BYTES + 3] ^= 0x10
    return bytes(data)


def _truncate(page: bytes) -> bytes:
    return page[: HEADER_BYTES + 5]


def _wrong_length(page: bytes) -> bytes:
    return page + b"\0" * 8


def _stale_version(page: bytes) -> bytes:
    data = bytearray(page)
    struct.pack_into("<H", data, 4, 0)
    return bytes(data)


def _damage_every_page(directory: Path, damage: Callable[[bytes], bytes]) -> int:
    """Rewrites each segment of a file store with every page's bytes (header, then payload)
    damaged, each in a frame of its new length; returns how many pages it damaged."""
    count = 0
    for path in sorted((directory / "segments").iterdir()):
        data = path.read_bytes()
        with open(path, "rb") as f:
            found, _ = scan(Reader(f.fileno(), len(data)), len(MAGIC), len(data))
        frames = [MAGIC]
        for name, offset, length in found:
            page = blob_of(data[offset : offset + length])
            assert page is not None
            bad = damage(bytes(page))
            frames.append(frame_head(name, bad[:HEADER_BYTES], len(bad)) + bad)
        path.write_bytes(b"".join(frames))
        count += len(found)
    return count


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_flip_bit, "bad_checksum"),
        (_truncate, "bad_length"),
        (_wrong_length, "bad_length"),
        (_stale_version, "bad_version"),
    ],
)
def test_corrupt_pages_are_counted_misses_and_outputs_stay_equal(
    tmp_path: Path, device: str, damage: object, reason: str
) -> None:
    directory = tmp_path / "l3"
    url = f"file://{directory}"
    model = model_for("full", device)
    prompts = shared_prompts()
    _generate(model, url, prompts)
    assert _damage_every_page(directory, damage) > 0  # type: ignore[arg-type]
    result, storage = _generate(model, url, prompts)
    assert_equal_to_no_cache(model, prompts, result)
    stats = storage.backend.stats()
    assert stats.pages_corrupt > 0 and stats.misses_by_reason.get(reason, 0) > 0
    assert result.hit_lengths[0] == 0  # the first prompt found only damaged pages
