"""Trace loaders: real request logs as `RequestSpec` lists in arrival order.

Mooncake JSONL, one request a line::

    {"timestamp": 40, "input_length": 23769, "output_length": 3, "hash_ids": [151, 152, ...]}

`hash_ids` name the prompt's 512-token blocks (equal ids = equal blocks; the last block may be
partial) and map to tokens as `BlockPrompt` documents. Plain token JSONL: each line is a list
of token ids, or an object `{"token_ids": [...], "output_length": n}`; an object may also give
its `output_ids` (the answer a later turn quotes) and `after` (the 0-based row it waits for).

Output tokens a row does not give are drawn from a generator seeded with `seed`. A row of
either format with a `session_id` (or `chat_id`) field gives its request that session id. With
`max_sequence_len` (the most tokens the pools can ever hold for one request), a row asking for
more is validated before anything is allocated for it: its outputs are capped at one token
past the limit, so the replay still rejects it as too long and reports its line number
(`RequestSpec.source_line`), and a row claiming 10**11 output tokens costs nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from uniradix.sim.request_spec import BlockPrompt, RequestSpec, TokenPrompt
from uniradix.sim.workloads import VOCAB_SIZE

MOONCAKE_BLOCK_SIZE = 512
TRACE_FORMATS = ("mooncake", "tokens")


def _lines(path: Path, max_requests: int | None) -> Iterator[tuple[int, Any]]:
    count = 0
    with path.open() as f:
        for lineno, line in enumerate(f, 1):
            if max_requests is not None and count >= max_requests:
                return
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not JSON: {exc}") from None
            count += 1


def _int(row: dict[str, Any], field: str, where: str, minimum: int) -> int:
    value = row.get(field)
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # `1e11` is the integer 10**11 as JSON writers may print it
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{where}: {field} must be an integer >= {minimum}, got {value!r}")
    return value


def _session_id(row: Any, where: str) -> str | None:
    if not isinstance(row, dict):
        return None
    value = row.get("session_id", row.get("chat_id"))
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"{where}: session_id/chat_id must be a string or integer, got {value!r}")
    return str(value)


def _output_len(prompt_len: int, output_len: int, max_sequence_len: int | None) -> int:
    """`output_len`, capped so that the sequence is at most one token past the limit."""
    if max_sequence_len is None:
        return output_len
    return max(1, min(output_len, max_sequence_len + 1 - prompt_len))


def load_mooncake(
    path: str | Path,
    max_requests: int | None = None,
    seed: int = 0,
    block_size: int = MOONCAKE_BLOCK_SIZE,
    max_sequence_len: int | None = None,
) -> list[RequestSpec]:
    """Requests of a Mooncake trace, sorted by timestamp (stable)."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    rows = []
    for lineno, row in _lines(path, max_requests):
        where = f"{path}:{lineno}"
        if not isinstance(row, dict) or "token_ids" in row:
            hint = (
                " (a list of token ids: use trace_format 'tokens', --trace-format tokens)"
                if isinstance(row, list | dict)
                else ""
            )
            got = "an object with token_ids" if isinstance(row, dict) else type(row).__name__
            raise ValueError(f"{where}: expected a JSON object with hash_ids, got {got}{hint}")
        hash_ids = row.get("hash_ids")
        if not isinstance(hash_ids, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hash_ids
        ):
            raise ValueError(f"{where}: hash_ids must be a list of integers, got {hash_ids!r:.80}")
        input_length = _int(row, "input_length", where, 1)
        try:
            prompt = BlockPrompt(tuple(hash_ids), input_length, block_size)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        stamp = row.get("timestamp", 0)
        if not isinstance(stamp, int | float) or isinstance(stamp, bool):
            raise ValueError(f"{where}: timestamp must be a number, got {stamp!r}")
        out = _output_len(len(prompt), _int(row, "output_length", where, 1), max_sequence_len)
        rows.append((float(stamp), prompt, out, lineno, _session_id(row, where)))
    rows.sort(key=lambda r: r[0])
    return [
        RequestSpec(
            rid,
            prompt,
            rng.integers(0, VOCAB_SIZE, size=out, dtype=np.int64),
            stamp,
            source_line=lineno,
            session_id=sid,
        )
        for rid, (stamp, prompt, out, lineno, sid) in enumerate(rows)
    ]


def load_token_lists(
    path: str | Path,
    max_requests: int | None = None,
    seed: int = 0,
    output_len: int = 16,
    max_sequence_len: int | None = None,
) -> list[RequestSpec]:
    """Requests of a token-list JSONL in file order; `output_len` where a line gives none."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    specs: list[RequestSpec] = []
    for lineno, row in _lines(path, max_requests):
        where = f"{path}:{lineno}"
        fields = row if isinstance(row, dict) else {"token_ids": row}
        tokens = _ids(fields.get("token_ids"), where, "token_ids")
        given = fields.get("output_ids")
        if given is not None:
            given = _ids(given, where, "output_ids")
        out = len(given) if given is not None else output_len
        if "output_length" in fields:
            out = _int(fields, "output_length", where, 1)
        rid = len(specs)
        out = _output_len(len(tokens), out, max_sequence_len)
        outputs = rng.integers(0, VOCAB_SIZE, size=out, dtype=np.int64)
        if given is not None:  # the row's answer, cut to the (capped) output length
            outputs = np.asarray(given[:out], dtype=np.int64)
        specs.append(
            RequestSpec(
                rid,
                TokenPrompt(tokens),
                outputs,
                float(rid),
                _after(fields, where, rid),
                source_line=lineno,
                session_id=_session_id(row, where),
            )
        )
    return specs


def _ids(value: object, where: str, field: str) -> list[int]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
    ):
        raise ValueError(
            f"{where}: {field}: expected a non-empty list of ids >= 0, got {value!r:.80}"
        )
    return value


def _after(row: dict[str, Any], where: str, rid: int) -> int | None:
    """The earlier row this one waits for (0-based, counting kept rows)."""
    value = row.get("after")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < rid:
        raise ValueError(f"{where}: after must be an earlier row's index (< {rid}), got {value!r}")
    return value


def load_trace(
    path: str | Path,
    trace_format: str,
    max_requests: int | None = None,
    seed: int = 0,
    max_sequence_len: int | None = None,
) -> list[RequestSpec]:
    if trace_format == "mooncake":
        specs = load_mooncake(path, max_requests, seed, max_sequence_len=max_sequence_len)
    elif trace_format == "tokens":
        specs = load_token_lists(path, max_requests, seed, max_sequence_len=max_sequence_len)
    else:
        raise ValueError(f"unknown trace format {trace_format!r}; choose from {TRACE_FORMATS}")
    if not specs:
        raise ValueError(f"{path}: the trace has no requests (empty, or blank lines only)")
    return specs
