"""Adversarial traces for the auxiliary pools' eviction orders, seeded and deterministic:

==========  ===============================================================================
branches    many short branches off one long prefix, each branch revisited a few turns later
leaves      thousands of short leaves under one shared system prompt, a few asked again
bursts      multi-turn conversations with bursts of one-off prompts between their turns
==========  ===============================================================================

A revisit quotes the earlier answer (`after` the earlier turn), as a chat client does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from uniradix.sim.request_spec import RequestSpec, TokenPrompt
from uniradix.sim.workloads import VOCAB_SIZE


class _Trace:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.specs: list[RequestSpec] = []

    def tokens(self, lo: int, hi: int) -> np.ndarray:
        n = int(self.rng.integers(lo, hi + 1))
        return self.rng.integers(0, VOCAB_SIZE, size=n, dtype=np.int64)

    def add(self, prompt: np.ndarray, after: RequestSpec | None, sid: str | None) -> RequestSpec:
        rid = len(self.specs)
        out = self.tokens(8, 48)
        spec = RequestSpec(
            rid, TokenPrompt(prompt), out, float(rid), None if after is None else after.rid, sid
        )
        self.specs.append(spec)
        return spec

    def follow_up(self, turn: RequestSpec, sid: str | None) -> RequestSpec:
        prompt = np.concatenate([turn.prompt.token_ids(), turn.output_ids, self.tokens(16, 96)])
        return self.add(prompt, turn, sid)


def branches(
    seed: int = 0, prefix_len: int = 8192, count: int = 32, revisits: int = 2
) -> list[RequestSpec]:
    """`count` branches of 16-128 tokens off one prefix; each is continued `revisits` times,
    the continuations in random order after all first turns."""
    t = _Trace(seed)
    prefix = t.tokens(prefix_len, prefix_len)
    last = [t.add(np.concatenate([prefix, t.tokens(16, 128)]), None, f"b{i}") for i in range(count)]
    order = [i for i in range(count) for _ in range(revisits)]
    t.rng.shuffle(order)
    for i in order:
        last[i] = t.follow_up(last[i], f"b{i}")
    return t.specs


def leaves(
    seed: int = 0, system_len: int = 512, count: int = 1200, asked_again: float = 0.1
) -> list[RequestSpec]:
    """`count` questions of 32-256 tokens under one system prompt; a share `asked_again` of
    them gets a follow-up turn, a few hundred requests later."""
    t = _Trace(seed)
    system = t.tokens(system_len, system_len)
    due: dict[int, list[RequestSpec]] = {}  # request index -> turns to follow up then
    for i in range(count):
        turn = t.add(np.concatenate([system, t.tokens(32, 256)]), None, f"q{i}")
        if t.rng.random() < asked_again:
            due.setdefault(min(i + int(t.rng.integers(100, 400)), count - 1), []).append(turn)
        for earlier in due.pop(i, []):
            t.follow_up(earlier, earlier.session_id)
    return t.specs


def bursts(
    seed: int = 0, conversations: int = 16, turns: int = 6, burst: int = 12
) -> list[RequestSpec]:
    """Conversations (a 1-4k-token start) take turns round by round; between two rounds a
    burst of `burst` one-off prompts of 1-4k tokens passes through the cache."""
    t = _Trace(seed)
    last = [t.add(t.tokens(1024, 4096), None, f"c{c}") for c in range(conversations)]
    for _ in range(turns - 1):
        for _ in range(burst):
            t.add(t.tokens(1024, 4096), None, None)
        last = [t.follow_up(turn, turn.session_id) for turn in last]
    return t.specs


ADVERSARIAL: dict[str, Callable[..., list[RequestSpec]]] = {
    "branches": branches,
    "leaves": leaves,
    "bursts": bursts,
}
