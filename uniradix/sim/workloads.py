"""Built-in workloads: seeded, deterministic request lists with the sharing patterns of real
serving traffic.

=============  ==========================================================================
shared_prefix  N groups x M questions; each group's questions share one system prompt
multi_turn     conversations; turn k+1 = turn k's prompt + its answer + a new message
agentic        tool loops: a growing context with branches (alternative calls) and retries
agentic_interfered  agentic with bursts of one-off prompts while each tool runs
long_doc_qa    a few long documents, many questions about each
random         unrelated prompts (no sharing beyond chance)
=============  ==========================================================================

Sizes are keyword arguments with small defaults; `max_requests` keeps the first requests in
arrival order. Token ids are drawn from `[0, VOCAB_SIZE)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from uniradix.sim.request_spec import RequestSpec, TokenPrompt

VOCAB_SIZE = 1 << 30


class _Builder:
    """Draws tokens and appends specs in arrival order."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.specs: list[RequestSpec] = []

    def tokens(self, num_tokens: int) -> np.ndarray:
        return self.rng.integers(0, VOCAB_SIZE, size=num_tokens, dtype=np.int64)

    def length(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def add(
        self,
        prompt: np.ndarray,
        output_len: int,
        after: int | None = None,
        session_id: str | None = None,
    ) -> RequestSpec:
        rid = len(self.specs)
        spec = RequestSpec(
            rid, TokenPrompt(prompt), self.tokens(output_len), float(rid), after, session_id
        )
        self.specs.append(spec)
        return spec


def shared_prefix(
    seed: int = 0,
    groups: int = 8,
    questions: int = 16,
    system_len: int = 1024,
    question_len: int = 64,
    output_len: int = 32,
) -> list[RequestSpec]:
    """Questions are sent group by group, interleaved (question q of every group, then q+1)."""
    b = _Builder(seed)
    systems = [b.tokens(system_len) for _ in range(groups)]
    for _ in range(questions):
        for system in systems:
            question = b.tokens(b.length(question_len // 2, question_len))
            b.add(np.concatenate([system, question]), b.length(output_len // 2, output_len))
    return b.specs


def multi_turn(
    seed: int = 0,
    conversations: int = 24,
    turns: int = 6,
    system_len: int = 256,
    message_len: int = 96,
    output_len: int = 64,
) -> list[RequestSpec]:
    """All conversations share a system prompt. Turns are sent round by round; each turn waits
    for the previous answer (`after`)."""
    b = _Builder(seed)
    system = b.tokens(system_len)
    last: list[RequestSpec | None] = [None] * conversations
    for _ in range(turns):
        for c in range(conversations):
            message = b.tokens(b.length(message_len // 4, message_len))
            prev = last[c]
            if prev is None:
                prompt = np.concatenate([system, message])
            else:
                prompt = np.concatenate([prev.prompt.token_ids(), prev.output_ids, message])
            after = None if prev is None else prev.rid
            last[c] = b.add(prompt, b.length(output_len // 4, output_len), after, f"chat{c}")
    return b.specs


def agentic(
    seed: int = 0,
    agents: int = 8,
    steps: int = 12,
    system_len: int = 512,
    tool_result_len: int = 256,
    output_len: int = 48,
    branch_prob: float = 0.2,
    retry_prob: float = 0.15,
    one_off_per_step: int = 0,
    one_off_len: int = 1024,
) -> list[RequestSpec]:
    """Each step sends the whole context; the answer (a tool call) and the tool's result are
    appended to it. A retry resends the same context (the call failed); a branch also sends
    the context with an alternative instruction that leads nowhere. The steps and retries of
    agent `a` carry session id `agent{a}`; a branch does not continue the session (no id).
    `one_off_per_step` unrelated prompts (no session) of up to `one_off_len` tokens arrive
    after each agent's step, and its next step waits for the last of them: other traffic
    served while the tool runs."""
    b = _Builder(seed)
    system = b.tokens(system_len)
    contexts = [np.concatenate([system, b.tokens(b.length(32, 128))]) for _ in range(agents)]
    last: list[int | None] = [None] * agents
    for _ in range(steps):
        for a in range(agents):
            sid = f"agent{a}"
            spec = b.add(contexts[a], b.length(output_len // 4, output_len), last[a], sid)
            if b.rng.random() < retry_prob:
                spec = b.add(contexts[a], b.length(output_len // 4, output_len), spec.rid, sid)
            if b.rng.random() < branch_prob:
                alternative = np.concatenate([contexts[a], b.tokens(b.length(8, 32))])
                b.add(alternative, b.length(output_len // 4, output_len), last[a])
            last[a] = spec.rid
            for _ in range(one_off_per_step):  # served while the tool runs
                prompt = b.tokens(b.length(one_off_len // 2, one_off_len))
                last[a] = b.add(prompt, b.length(8, 32), spec.rid).rid
            result = b.tokens(b.length(tool_result_len // 4, tool_result_len))
            contexts[a] = np.concatenate([contexts[a], spec.output_ids, result])
    return b.specs


def long_doc_qa(
    seed: int = 0,
    documents: int = 4,
    questions: int = 24,
    document_len: int = 8192,
    question_len: int = 48,
    output_len: int = 64,
) -> list[RequestSpec]:
    """Questions about the documents arrive round robin."""
    b = _Builder(seed)
    docs = [b.tokens(document_len) for _ in range(documents)]
    for _ in range(questions):
        for doc in docs:
            question = b.tokens(b.length(question_len // 2, question_len))
            b.add(np.concatenate([doc, question]), b.length(output_len // 4, output_len))
    return b.specs


def random_prompts(
    seed: int = 0,
    requests: int = 128,
    min_prompt_len: int = 128,
    max_prompt_len: int = 2048,
    output_len: int = 128,
) -> list[RequestSpec]:
    b = _Builder(seed)
    for _ in range(requests):
        prompt = b.tokens(b.length(min_prompt_len, max_prompt_len))
        b.add(prompt, b.length(output_len // 4, output_len))
    return b.specs


def agentic_interfered(seed: int = 0, **sizes: Any) -> list[RequestSpec]:
    """`agentic` with three long tool calls per agent, each overlapped by a burst of 16
    one-off prompts (up to 2048 tokens): between two turns of an agent, other traffic larger
    than a quarter of everything passes through the cache (the session cache's case)."""
    defaults: dict[str, Any] = {"steps": 3, "one_off_per_step": 16, "one_off_len": 2048}
    return agentic(seed, **(defaults | sizes))


WORKLOADS: dict[str, Callable[..., list[RequestSpec]]] = {
    "shared_prefix": shared_prefix,
    "multi_turn": multi_turn,
    "agentic": agentic,
    "agentic_interfered": agentic_interfered,
    "long_doc_qa": long_doc_qa,
    "random": random_prompts,
}


def generate_workload(
    name: str, seed: int = 0, max_requests: int | None = None
) -> list[RequestSpec]:
    """The named workload with default sizes, cut to its first `max_requests` requests."""
    try:
        make = WORKLOADS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; choose from {sorted(WORKLOADS)}") from None
    specs = make(seed=seed)
    return specs if max_requests is None else specs[:max_requests]
