"""`benchmarks.studies.lost_hit_origins` names where a lost hit's boundary came from: a
checkpoint an earlier request listed (kept then lost, recreated since, or still running), an
earlier prompt end, or a grid boundary that earlier prompts only computed through."""

import pytest

from benchmarks.studies import lost_hit_origins
from benchmarks.studies.lost_hit_origins import Origins, prefix_id, replay_options
from uniradix.sim.lost_hits import LostHit
from uniradix.sim.request_spec import BlockPrompt
from uniradix.types import DEFAULT_SWA_EVICTION_POLICY

PROMPT = BlockPrompt((1, 2, 3, 4), 2000, 512)


def lost_at(boundary: int) -> LostHit:
    return LostHit(boundary, 0, ("mamba_missing", "swa_tombstoned"))


def test_kinds_of_boundary() -> None:
    origins = Origins()
    origins.placer[prefix_id(PROMPT, 1024)] = 7  # request 7 listed a checkpoint at 1024
    origins.placer[prefix_id(PROMPT, 1536)] = 8
    origins.finished_at[7] = 100  # the node counter when it finished
    origins.ends.add(prefix_id(PROMPT, 1200))
    origins.boundary_node.update({1: 90, 2: 150, 3: 5})
    origins.count(1, PROMPT, lost_at(1024))  # node 90 predates request 7's finish
    origins.count(2, PROMPT, lost_at(1024))  # node 150 was made after it
    origins.count(3, PROMPT, lost_at(1536))  # request 8 has not finished
    origins.count(4, PROMPT, lost_at(1200))
    origins.count(5, PROMPT, lost_at(512))
    origins.count(6, PROMPT, lost_at(400))
    causes = "mamba_missing+swa_tombstoned"
    assert origins.tokens == {
        ("placed", causes): 1024,
        ("placed_recreated", causes): 1024,
        ("placed_running", causes): 1536,
        ("prompt_end", causes): 1200,
        ("grid_mid_prompt", causes): 512,
        ("other", causes): 400,
    }


def test_a_prefix_differs_by_block_and_by_length() -> None:
    other = BlockPrompt((1, 2, 9, 4), 2000, 512)
    assert prefix_id(PROMPT, 1024) == prefix_id(other, 1024)  # blocks 1, 2 shared
    assert prefix_id(PROMPT, 1100) != prefix_id(other, 1100)  # block 3 differs
    assert prefix_id(PROMPT, 1024) != prefix_id(PROMPT, 1008)


def test_the_swa_order_is_an_option(monkeypatch: pytest.MonkeyPatch) -> None:
    # The sizing reads the Mooncake trace (in ../shared, not in a clone): a fixed pool here.
    monkeypatch.setattr(lost_hit_origins, "full_pool", lambda options: (1 << 20, 1 << 22))
    options = replay_options(
        ["--max-requests", "20", "--config", "swa", "--window", "4096"]
        + ["--swa-policy", "greedy_dual_output"]
    )
    assert (options.config, options.pools.sliding_window) == ("swa", 4096)
    assert options.eviction.swa_eviction_policy == "greedy_dual_output"
    assert options.max_requests == 20
    assert replay_options([]).eviction.swa_eviction_policy == DEFAULT_SWA_EVICTION_POLICY
