"""The ideal hit count of a request sequence: what a cache that never evicts would reuse.

Computed from the tokens alone, independently of `UnifiedRadixCache`: a trie of every
sequence seen so far (each request's prompt and outputs but the last, the KV an engine has
computed), whose edges are compared whole: the exact token-level common prefix.

Rounding, the same as an engine's (and so the replayer's) when nothing is evicted: request
`i` reuses `floor_page(min(lcp_i, len(prompt_i) - 1))` tokens, where `lcp_i` is its longest
common prefix with any earlier sequence. The last prompt token is always computed (its logits
give the first output token), and a cache keeps whole pages only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from uniradix.key import UNIT_BYTES, common_prefix_len
from uniradix.sim.request_spec import RequestSpec


class PrefixTrie:
    """Unbounded radix trie over token sequences. An edge is a whole run of tokens (packed as
    8-byte units) compared at once, and children are indexed by their first token, so a
    lookup costs one dictionary probe and one compare per edge, not per fixed-size chunk."""

    def __init__(self) -> None:
        self._edges: list[bytes] = [b""]
        self._children: list[dict[bytes, int]] = [{}]

    def longest_prefix(self, tokens: np.ndarray) -> int:
        """Length of the longest common prefix of `tokens` with any inserted sequence."""
        units = _packed(tokens)
        node, off = 0, 0
        while off < len(units):
            child = self._children[node].get(units[off : off + UNIT_BYTES])
            if child is None:
                break
            edge = self._edges[child]
            if not units.startswith(edge, off):
                return off // UNIT_BYTES + common_prefix_len(edge, units[off : off + len(edge)])
            node, off = child, off + len(edge)
        return off // UNIT_BYTES

    def insert(self, tokens: np.ndarray) -> None:
        units = _packed(tokens)
        node, off = 0, 0
        while off < len(units):
            first = units[off : off + UNIT_BYTES]
            child = self._children[node].get(first)
            if child is None:
                self._children[node][first] = self._new(units[off:])
                return
            edge = self._edges[child]
            if not units.startswith(edge, off):  # diverges (or ends) inside: split the edge
                cut = common_prefix_len(edge, units[off : off + len(edge)]) * UNIT_BYTES
                mid = self._new(edge[:cut])
                self._children[node][first] = mid
                self._edges[child] = edge[cut:]
                self._children[mid][edge[cut : cut + UNIT_BYTES]] = child
                child, edge = mid, edge[:cut]
            node, off = child, off + len(edge)

    def _new(self, edge: bytes) -> int:
        self._edges.append(edge)
        self._children.append({})
        return len(self._edges) - 1


def _packed(tokens: np.ndarray) -> bytes:
    return np.ascontiguousarray(tokens, dtype="<i8").tobytes()


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
