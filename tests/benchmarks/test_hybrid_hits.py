"""The hybrid-hits benchmark's sizing and its before/after table."""

import json
from pathlib import Path

from benchmarks.hybrid_hits import (
    base_options,
    compare,
    full_kv_share,
    full_pool,
    pool_text,
    sized,
)


def test_sizes_follow_the_issue() -> None:
    base = base_options("multi_turn", "unused")
    full_tokens, working = full_pool(base)
    assert full_tokens % 16 == 0 and full_tokens >= working // 4
    opts = sized(base.updated(full_tokens=65536), "hybrid", 1024, 2)
    assert (opts.pools.swa_tokens, opts.pools.mamba_slots, opts.pools.sliding_window) == (
        32768,
        1024,
        1024,
    )


def test_a_fractional_scale_rounds_up_to_a_page_and_a_slot() -> None:
    base = base_options("trace", "unused").updated(full_tokens=5335968)
    one = sized(base, "hybrid", 4096, 1)
    assert (one.pools.swa_tokens, one.pools.mamba_slots) == (1334000, 512)
    finer = sized(base, "hybrid", 4096, 1.0625)
    # 1334000 * 1.0625 = 1417375 tokens, up to a page of 16; 544 slots
    assert (finer.pools.swa_tokens, finer.pools.mamba_slots) == (1417376, 544)
    assert sized(base, "mamba", None, 1.25).pools.mamba_slots == 640
    assert sized(base, "mamba", None, 1.25).pools.swa_tokens == one.pools.swa_tokens
    assert sized(base, "swa", 4096, 1.3, slots=100).pools.mamba_slots == 100


def test_the_pool_column_lists_every_multiple_tried() -> None:
    row = {
        "window": 4096,
        "reaches_target_at_scale": 1.25,
        "target_swa_tokens": 1667504,
        "target_mamba_slots": 640,
        "scales_tried": [(1.0, 0.939), (1.125, 0.947), (1.25, 0.951)],
    }
    assert pool_text(row) == "1667504, 640 (x1: 0.939, x1.125: 0.947, x1.25: 0.951)"
    missed = {**row, "reaches_target_at_scale": None, "scales_tried": [(1.0, 0.9), (2.0, 0.94)]}
    assert pool_text(missed) == "not reached (x1: 0.900, x2: 0.940)"
    assert pool_text({**missed, "scales_tried": [(1.0, 0.9)]}) == "-"
    assert pool_text({"reaches_target_at_scale": None}) == "-"
    assert pool_text({**row, "window": None}).startswith("-, 640 (x1: 0.939")


def test_compare_table(tmp_path: Path) -> None:
    lost = {"full_kv_hit_tokens": 10, "lost_tokens": 5, "causes": {}}
    row = {
        "source": "trace",
        "config": "swa",
        "window": 1024,
        "full_hit_rate": 0.4,
        "hit_rate": 0.2,
        "ratio": 0.5,
        "lost_hits": lost,
        "reaches_target_at_scale": None,
    }
    for label, ratio in (("before", 0.5), ("after", 0.96)):
        r = {**row, "ratio": ratio, "hit_rate": 0.4 * ratio}
        if ratio > 0.95:
            r.update(reaches_target_at_scale=1, target_swa_tokens=4096, target_mamba_slots=512)
        doc = {"meta": {"command": f"run {label}"}, "rows": [r]}
        (tmp_path / f"hybrid_hits_{label}.json").write_text(json.dumps(doc))
    paths = [str(tmp_path / f"hybrid_hits_{lb}.json") for lb in ("before", "after")]
    compare(paths, tmp_path)
    text = (tmp_path / "hybrid_hits.md").read_text()
    assert (
        "| trace | swa | 1024 | 0.500 (0.2000 / 0.4000) | 0.960 (0.3840 / 0.4000) | - | 4096, 512 |"
        in text
    )
    assert "- before: `run before`" in text


def test_full_kv_share_is_the_hybrids_own_full_match_against_full_only() -> None:
    # 50 usable hit tokens at a hit rate of 0.25: 200 prompt tokens; the full KV matched 60
    # (0.3 of the prompts) against full-only's 0.4.
    lost = {"usable_hit_tokens": 50, "full_kv_hit_tokens": 60}
    row = {"lost_hits": lost, "hit_rate": 0.25, "full_hit_rate": 0.4}
    assert full_kv_share(row) == "0.750"
    assert full_kv_share({**row, "full_hit_rate": 0.0}) == "-"
