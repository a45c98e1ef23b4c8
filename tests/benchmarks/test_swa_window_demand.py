"""The page identities `benchmarks.studies.swa_window_demand` counts windows by: prompts sharing
blocks share their pages, a different block before makes the same block id a different page."""

from benchmarks.studies.swa_window_demand import chain, window_pages
from uniradix.sim.request_spec import BlockPrompt


def pages(hash_ids: tuple[int, ...], num_tokens: int, end: int, window: int) -> set[object]:
    prompt = BlockPrompt(hash_ids, num_tokens, 64)
    return window_pages(prompt, chain(prompt), end, window)  # type: ignore[return-value]


def test_a_window_is_its_pages_before_the_end() -> None:
    assert len(pages((1, 2), 128, 96, 48)) == 3  # pages 3, 4, 5 of 16 tokens
    assert len(pages((1, 2), 128, 32, 48)) == 2  # clipped at the prompt start


def test_shared_blocks_share_pages_and_a_different_history_does_not() -> None:
    first = pages((1, 2, 3), 192, 128, 64)
    turn = pages((1, 2, 4), 192, 128, 64)  # same two blocks, then another
    assert first == turn
    other = pages((9, 2, 3), 192, 128, 64)  # block 2 after a different block
    assert not (first & other)
    # A partial last block is a prefix of the full block with the same id.
    assert pages((1, 2), 100, 96, 32) <= pages((1, 2), 128, 128, 64)
