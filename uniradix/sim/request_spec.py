"""RequestSpec: one request of a workload or trace, as a client sends it.

A spec is what arrives at the server: a prompt, the answer the model will give (its tokens are
fixed in advance by a seeded generator, so a replay is deterministic and a follow-up turn can
quote the answer) and, optionally, the request whose answer the client waits for before
sending this one. Prompts of long traces are kept as block ids and expanded only when the
request is admitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import numpy as np


class Prompt(Protocol):
    def __len__(self) -> int: ...

    def token_ids(self) -> np.ndarray:
        """The prompt as a 1-D int64 array (a fresh array the caller may keep)."""
        ...


class TokenPrompt:
    """A prompt held as its token ids."""

    __slots__ = ("_ids",)

    def __init__(self, ids: np.ndarray | list[int]) -> None:
        arr = np.asarray(ids, dtype=np.int64)
        if arr.ndim != 1 or arr.size == 0:
            raise ValueError(f"a prompt needs at least one token id, got shape {arr.shape}")
        self._ids = arr

    def __len__(self) -> int:
        return int(self._ids.shape[0])

    def token_ids(self) -> np.ndarray:
        return self._ids.copy()


class BlockPrompt:
    """A prompt made of hashed blocks (Mooncake traces): block `h` is the tokens
    `h * block_size + j` for `j` in `[0, block_size)`, so equal hash ids give equal tokens and
    different ones never share a token. The last block is cut to `num_tokens`::

        hash_ids [7, 9], block_size 4, num_tokens 6  ->  [28, 29, 30, 31, 36, 37]
    """

    __slots__ = ("block_size", "hash_ids", "num_tokens")

    def __init__(self, hash_ids: tuple[int, ...], num_tokens: int, block_size: int) -> None:
        if (
            not hash_ids
            or not (len(hash_ids) - 1) * block_size < num_tokens <= len(hash_ids) * block_size
        ):
            raise ValueError(
                f"{len(hash_ids)} blocks of {block_size} tokens cannot hold "
                f"input_length={num_tokens} (only the last block may be partial)"
            )
        if min(hash_ids) < 0:
            raise ValueError(f"hash ids must be non-negative, got {min(hash_ids)}")
        self.hash_ids = hash_ids
        self.num_tokens = num_tokens
        self.block_size = block_size

    def __len__(self) -> int:
        return self.num_tokens

    def token_ids(self) -> np.ndarray:
        blocks = np.asarray(self.hash_ids, dtype=np.int64)[:, None] * self.block_size
        return (blocks + np.arange(self.block_size, dtype=np.int64)).reshape(-1)[: self.num_tokens]


@dataclass(frozen=True, eq=False)
class RequestSpec:
    """`rid` is the position in arrival order. `output_ids` (at least one token) are the
    tokens the model generates; `after` is the rid of an earlier request that must finish
    before this one is sent (the next turn of a conversation). `source_line` is the line of
    the trace file the request came from (None for generated workloads)."""

    rid: int
    prompt: Prompt
    output_ids: np.ndarray
    arrival_ms: float = 0.0
    after: int | None = None
    session_id: str | None = None  # the conversation or agent this turn belongs to
    source_line: int | None = None

    def __post_init__(self) -> None:
        if self.output_ids.ndim != 1 or self.output_ids.shape[0] < 1:
            raise ValueError(f"request {self.rid}: output_ids must hold at least one token")
        if self.after is not None and not 0 <= self.after < self.rid:
            raise ValueError(f"request {self.rid}: after={self.after} is not an earlier request")

    @classmethod
    def for_generation(cls, rid: int, prompt: Prompt, output_len: int) -> RequestSpec:
        """A request whose outputs a model will choose (an engine's): `output_ids` only
        fixes their number (zeros, which a computing runner never reads)."""
        if output_len < 1:
            raise ValueError(f"request {rid}: output_len must be >= 1, got {output_len}")
        return cls(rid, prompt, np.zeros(output_len, dtype=np.int64))

    @cached_property  # read per running request per step (the decode reserve)
    def output_len(self) -> int:
        return int(self.output_ids.shape[0])

    def full_sequence(self) -> np.ndarray:
        """Every token whose KV an engine computes: the prompt and all outputs but the last
        (the last sampled token is never fed back)."""
        return np.concatenate([self.prompt.token_ids(), self.output_ids[:-1]])
