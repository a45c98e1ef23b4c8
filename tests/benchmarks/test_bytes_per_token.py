"""`benchmarks/bytes_per_token.py` on the uniradix side, small: the cell measures what the
tree keeps, and the table names every side's figures next to the Rust core's."""

from __future__ import annotations

from benchmarks.bytes_per_token import SEQ_TOKENS, measure_cell, table


def test_heap_per_token_counts_keys_and_slots() -> None:
    cell = measure_cell("uniradix", 16, 40 * SEQ_TOKENS, heap=True)
    assert cell["cached_tokens"] == 40 * SEQ_TOKENS  # page 16: whole sequences, no eviction
    # packed keys (8 B/token) and slot arrays (8 B/token), plus nodes of 256 tokens each
    assert 16 <= cell["bytes_per_token"] < 40


def test_rss_cell_fills_the_same_content() -> None:
    heap = measure_cell("uniradix", 1, 8 * SEQ_TOKENS, heap=True)
    rss = measure_cell("uniradix", 1, 8 * SEQ_TOKENS, heap=False)
    assert rss["cached_tokens"] == heap["cached_tokens"] > 7 * SEQ_TOKENS


def test_table_gives_the_ratio_to_the_rust_core() -> None:
    row = {"page_size": 1, "size": 10, "cached_tokens": 10, "class": "C", "heap": 1.0}
    rows = [{**row, "side": "uniradix", "rss": 30.0}, {**row, "side": "rust", "rss": 20.0}]
    text = table(rows, "cmd")
    assert "| uniradix | C | 1 | 10 | 30.0 | 1.0 | 1.50 |" in text
    assert "| rust | C | 1 | 10 | 20.0 | 1.0 | 1.00 |" in text
