"""Request streams for the side-by-side benchmark, and what each request does to a cache.

Both sides (uniradix in the project's environment, SGLang in `.peer-venv`) import this module
and `benchmarks/ops.py`, which depend on nothing but the standard library and torch, so the
request stream is regenerated identically from a `StreamSpec` (workload, seed, scale) rather
than shipped as a file; each side reports a `StreamDigest` of what it played, so a mismatch
would show.

A request is `tokens` (prompt then output) with `prompt_len`. `benchmarks/ops.py` plays it
against a cache with exactly this call sequence, one request at a time (a stream with
`batch > 1` runs steps 1-3 for each request of a batch, then steps 4-7 for each):

1. `match_prefix(key=prompt)`  -> `matched` tokens ending at `last_device_node`
2. the matched prefix's KV slots (uniradix returns them with the match; SGLang 0.5.23
   gathers them with `path_device_indices`, timed separately as `prefix_indices`)
3. `inc_lock_ref(last_device_node)` -> receipt
4. if a pool is short of the `need = ceil((len(tokens) - matched) / page) * page` fresh slots
   (or of a Mamba state slot): `evict(shortfall)`
5. allocate the `need` slots (and the Mamba slot); a request that still does not fit is
   counted in `failed` and only unlocked
6. `insert(key=tokens floored to whole pages, value=matched slots + new slots,
   prev_prefix_len=matched)`; the cache frees duplicate slots itself; the driver frees the
   new slots of the unaligned tail page, and the Mamba slot when the tree already had one
7. `dec_lock_ref(last_device_node, receipt)`

Each call of steps 1-7 is timed alone with `time.perf_counter_ns`; building keys and params
is not timed. The hit rate is matched tokens / prompt tokens.

Workloads (vocabulary 32000, `random.Random(seed)`; `scale` multiplies the request count):

- chat: 200 conversations x 5 turns behind one shared 1000-token system prompt; each turn
  adds a user message and an answer of 80-120 tokens each; turn t's prompt is the whole
  conversation so far; turns are taken turn-major, shuffled within a turn.
- fewshot: 64 prefixes of 800-1200 tokens x 20 questions of 80-120 tokens with answers of
  30-70 tokens, shuffled.
- random: 1000 unrelated prompts of 500-1500 tokens with answers of 50-150 tokens.
- longchat: long-context chat served in batches of 16 (`StreamSpec.batch`): 200
  conversations x 5 turns behind one 1000-token system prompt, user messages of 80-120 and
  answers of 100-140 tokens, so prompts grow from ~1,100 to ~2,100 tokens; turn-major,
  shuffled within a turn. Requests of one batch share prefixes not cached yet, so inserts
  meet duplicates (the cache frees them), as a batching scheduler's do.
- longdoc: 16 documents of 8-32k tokens x 6 questions of 50-150 tokens with answers of
  50-150 tokens, shuffled (prompts of 8-32k tokens; values of thousands of slots).
- mooncake: a Mooncake JSONL trace; block hash `h` stands for the 512 tokens
  `h * 512 .. h * 512 + 511`, the prompt is the first `input_length` tokens of its blocks and
  the answer `output_length` tokens no other request shares.
"""

from __future__ import annotations

import hashlib
import json
import random
from array import array
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

VOCAB = 32000
MOONCAKE_BLOCK_TOKENS = 512
_OUTPUT_BASE = 1 << 40  # output tokens of the trace, above every block token


@dataclass(frozen=True)
class Request:
    tokens: list[int]
    prompt_len: int


@dataclass(frozen=True)
class StreamSpec:
    workload: str
    seed: int = 0
    scale: float = 1.0
    trace_path: str | None = None
    batch: int = 1  # requests matched and locked together before any of them inserts

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _tokens(rng: random.Random, lo: int, hi: int) -> list[int]:
    return [rng.randrange(VOCAB) for _ in range(rng.randint(lo, hi))]


def _count(base: int, scale: float) -> int:
    return max(1, round(base * scale))


def chat(rng: random.Random, scale: float) -> Iterator[Request]:
    system = _tokens(rng, 1000, 1000)
    conversations = [list(system) for _ in range(_count(200, scale))]
    for _turn in range(5):
        order = list(range(len(conversations)))
        rng.shuffle(order)
        for c in order:
            history = conversations[c]
            history.extend(_tokens(rng, 80, 120))
            prompt_len = len(history)
            history.extend(_tokens(rng, 80, 120))
            yield Request(list(history), prompt_len)


def fewshot(rng: random.Random, scale: float) -> Iterator[Request]:
    prefixes = [_tokens(rng, 800, 1200) for _ in range(_count(64, scale))]
    jobs = [p for p in prefixes for _ in range(20)]
    rng.shuffle(jobs)
    for prefix in jobs:
        prompt = prefix + _tokens(rng, 80, 120)
        yield Request(prompt + _tokens(rng, 30, 70), len(prompt))


def random_prompts(rng: random.Random, scale: float) -> Iterator[Request]:
    for _ in range(_count(1000, scale)):
        prompt = _tokens(rng, 500, 1500)
        yield Request(prompt + _tokens(rng, 50, 150), len(prompt))


def long_chat(rng: random.Random, scale: float) -> Iterator[Request]:
    system = _tokens(rng, 1000, 1000)
    conversations = [list(system) for _ in range(_count(200, scale))]
    for _turn in range(5):
        order = list(range(len(conversations)))
        rng.shuffle(order)
        for c in order:
            history = conversations[c]
            history.extend(_tokens(rng, 80, 120))
            prompt_len = len(history)
            history.extend(_tokens(rng, 100, 140))
            yield Request(list(history), prompt_len)


def long_documents(rng: random.Random, scale: float) -> Iterator[Request]:
    documents = [_tokens(rng, 8192, 32768) for _ in range(_count(16, scale))]
    jobs = [d for d in documents for _ in range(6)]
    rng.shuffle(jobs)
    for document in jobs:
        prompt = document + _tokens(rng, 50, 150)
        yield Request(prompt + _tokens(rng, 50, 150), len(prompt))


def mooncake(path: str, scale: float) -> Iterator[Request]:
    lines = Path(path).read_text().splitlines()
    block = MOONCAKE_BLOCK_TOKENS
    for i, line in enumerate(lines[: _count(len(lines), scale)]):
        record = json.loads(line)
        prompt_len = int(record["input_length"])
        tokens: list[int] = []
        for h in record["hash_ids"]:
            tokens.extend(range(h * block, h * block + block))
        if len(tokens) < prompt_len:
            raise ValueError(f"trace line {i}: {len(tokens)} block tokens < {prompt_len}")
        del tokens[prompt_len:]
        out = _OUTPUT_BASE + i * (1 << 20)
        tokens.extend(range(out, out + int(record["output_length"])))
        yield Request(tokens, prompt_len)


def requests(spec: StreamSpec) -> Iterator[Request]:
    """The requests of `spec`, generated lazily (a trace's tokens never all sit in memory)."""
    rng = random.Random(spec.seed)
    if spec.workload == "chat":
        return chat(rng, spec.scale)
    if spec.workload == "fewshot":
        return fewshot(rng, spec.scale)
    if spec.workload == "random":
        return random_prompts(rng, spec.scale)
    if spec.workload == "longchat":
        return long_chat(rng, spec.scale)
    if spec.workload == "longdoc":
        return long_documents(rng, spec.scale)
    if spec.workload == "mooncake":
        if not spec.trace_path:
            raise ValueError("the mooncake workload needs trace_path")
        return mooncake(spec.trace_path, spec.scale)
    raise ValueError(
        f"unknown workload {spec.workload!r} (chat, fewshot, random, longchat, longdoc, mooncake)"
    )


class StreamDigest:
    """SHA-256 over the prompt lengths and tokens of the requests actually played: both sides
    report it, so two runs that saw different streams cannot be compared by mistake."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()

    def update(self, request: Request) -> None:
        self._sha.update(request.prompt_len.to_bytes(8, "little"))
        self._sha.update(array("q", request.tokens).tobytes())

    def hexdigest(self) -> str:
        return self._sha.hexdigest()[:16]
