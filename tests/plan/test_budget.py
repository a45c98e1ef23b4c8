"""Budgets in bytes convert to pools exactly (token pools floored to whole pages)."""

import pytest

from uniradix.plan import preset
from uniradix.plan.budget import Split, size_pools
from uniradix.sim.replay import ReplayOptions


def test_full_only_budget_floors_to_pages() -> None:
    sizes = size_pools(preset("llama-3-8b"), 40 * 10**9, Split.even(("full",)), page_size=16)
    # 40e9 // 131072 = 305175 tokens, floored to 19073 pages of 16.
    assert sizes.units == {"full": 305168}
    assert sizes.bytes == {"full": 305168 * 131072}
    assert sizes.unused_bytes == 40 * 10**9 - 305168 * 131072


def test_split_budget_per_pool() -> None:
    model = preset("qwen3-next-80b-a3b")
    split = Split.parse("full=0.75,mamba=0.25", model.pools())
    sizes = size_pools(model, 10**10, split, page_size=4)
    state = model.mamba_state_bytes
    assert sizes.units == {"full": 7_500_000_000 // 24576 // 4 * 4, "mamba": 2_500_000_000 // state}
    assert sizes.bytes["mamba"] == sizes.units["mamba"] * state
    described = sizes.describe()
    assert described["mamba"]["unit"] == "slots" and described["full"]["unit"] == "tokens"
    options = sizes.replay_options(ReplayOptions())
    assert (options.config, options.pools.full_tokens, options.pools.mamba_slots) == (
        "mamba",
        sizes.units["full"],
        sizes.units["mamba"],
    )
    assert options.model.full_layers == 12 and options.model.mamba_layers == 36


def test_swa_model_gets_its_window() -> None:
    model = preset("gpt-oss-120b")
    sizes = size_pools(model, 10**9, Split.even(model.pools()), page_size=1)
    options = sizes.replay_options(ReplayOptions())
    assert options.pools.sliding_window == 128 and options.config == "swa"
    assert options.pools.swa_tokens == options.pools.full_tokens == 5 * 10**8 // 36864


@pytest.mark.parametrize(
    "text, message",
    [
        ("full=0.5", "exactly the pools"),
        ("full=0.5,mamba=0.6", "summing to 1"),
        ("full=x,mamba=1", "POOL=FRACTION"),
        ("full,mamba=1", "POOL=FRACTION"),
        ("full=0.5,swa=0.5", "exactly the pools"),
    ],
)
def test_bad_splits(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Split.parse(text, ("full", "mamba"))


def test_budget_too_small_for_a_state() -> None:
    model = preset("nemotron-nano-9b-v2")
    with pytest.raises(ValueError, match="less than one state slot"):
        size_pools(model, 10**8, Split.even(model.pools()), page_size=1)
