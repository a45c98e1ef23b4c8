"""The ideal hit count of a request sequence: what a cache that never evicts would reuse.

Computed from the tokens alone, independently of `UnifiedRadixCache`: a trie of every
sequence seen so far (each request's prompt and outputs but the last, the KV an engine has
computed), walked in chunks of `CHUNK_TOKENS` with the exact token-level common prefix found
inside the last chunk.

Rounding, the same as an engine's (and so the replayer's) when nothing is evicted: request
`i` reuses `floor_page(min(lcp_i, len(prompt_i) - 1))` tokens, where `lcp_i` is its longest
common prefix with any earlier sequence. The last prompt token is always computed (its logits
give the first output token), and a cache keeps whole pages only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from uniradix.sim.request_spec import RequestSpec

CHUNK_TOKENS = 64


def _common_prefix_len(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.shape[0], b.shape[0])
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


class PrefixTrie:
    """Unbounded trie over token sequences; an edge is one chunk (a shorter last chunk ends
    a sequence). Children are also indexed by their first token, so a lookup compares only
    the chunks that can share something with the query."""

    def __init__(self) -> None:
        self._children: list[dict[bytes, int]] = [{}]
        self._by_first: list[dict[int, list[np.ndarray]]] = [{}]

    def longest_prefix(self, tokens: np.ndarray) -> int:
        """Length of the longest common prefix of `tokens` with any inserted sequence."""
        node, pos, n = 0, 0, tokens.shape[0]
        while pos < n:
            chunk = tokens[pos : pos + CHUNK_TOKENS]
            child = self._children[node].get(chunk.tobytes())
            if child is not None and chunk.shape[0] == CHUNK_TOKENS:
                node, pos = child, pos + CHUNK_TOKENS
                continue
            candidates = self._by_first[node].get(int(chunk[0]), [])
            return pos + max((_common_prefix_len(c, chunk) for c in candidates), default=0)
        return pos

    def insert(self, tokens: np.ndarray) -> None:
        node = 0
        for pos in range(0, tokens.shape[0], CHUNK_TOKENS):
            chunk = tokens[pos : pos + CHUNK_TOKENS]
            key = chunk.tobytes()
            child = self._children[node].get(key)
            if child is None:
                child = len(self._children)
                self._children.append({})
                self._by_first.append({})
                self._children[node][key] = child
                self._by_first[node].setdefault(int(chunk[0]), []).append(chunk.copy())
            node = child


def ideal_hits(specs: Sequence[RequestSpec], page_size: int = 1) -> list[int]:
    """Per request, in arrival order: the tokens an unbounded cache would reuse."""
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    trie = PrefixTrie()
    hits = []
    for spec in specs:
        prompt = spec.prompt.token_ids()
        usable = min(trie.longest_prefix(prompt), prompt.shape[0] - 1)
        hits.append(usable - usable % page_size)
        trie.insert(np.concatenate([prompt, spec.output_ids[:-1]]))
    return hits
