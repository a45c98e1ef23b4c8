"""The engine's equal-output test with the session cache on: two turns per session (the
second extends the first's prompt and answer), every config and page size, pools small enough
to evict covered context; generation must still equal generation with no cache."""

from __future__ import annotations

import pytest

from tests.engine.test_engine_equal_output import (
    MAX_NEW_TOKENS,
    assert_equal_to_no_cache,
    engine_config,
    model_for,
    shared_prompts,
)
from uniradix.engine.engine import Engine
from uniradix.engine.run import CONFIG_PATTERNS
from uniradix.sessions import SessionCache


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("config", sorted(CONFIG_PATTERNS))
def test_two_turns_with_sessions_equal_no_cache(config: str, page_size: int, device: str) -> None:
    model = model_for(config, device)
    engine = Engine(
        model,
        engine_config(config, page_size, enable_session_cache=True, max_context_len=48),
    )
    first = shared_prompts()
    sids = [f"s{i % 4}" for i in range(len(first))]
    turn1 = engine.generate(first, MAX_NEW_TOKENS, sids)
    assert_equal_to_no_cache(model, first, turn1)
    second = [p + t + [i % 5, 3] for i, (p, t) in enumerate(zip(first, turn1.tokens, strict=True))]
    second = second[:6]  # the later turns of a few sessions
    turn2 = engine.generate(second, MAX_NEW_TOKENS, sids[:6])
    assert_equal_to_no_cache(model, second, turn2)
    sessions = engine.cache.sessions
    assert isinstance(sessions, SessionCache)
    assert sessions.stats().registered_turns == len(first) + len(second)
    assert turn2.hit_tokens > 0
    assert sessions.stats().evicted_while_covered > 0  # pressure reached covered context
    assert turn1.evicted_tokens["full"] + turn2.evicted_tokens["full"] > 0
    for sid in set(sids):
        engine.cache.release_session(sid)
    engine.cache.check_invariants()
    assert sessions.stats().covered_nodes == 0
