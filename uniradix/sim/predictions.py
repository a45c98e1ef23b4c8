"""What a router's index promised next to what each instance delivered, per instance.

For every request routed to an instance, summed over them:

- `predicted_hit_tokens`: what the router expected (a cache-aware router: the resumable
  prefix plus the pages of prompts in flight there; other routers: the index's figure);
- `indexed_hit_tokens`: the resumable prefix the index held for it at routing
  (`KVEventIndex.resumable_lengths`, on any medium: a host or storage hit loads back);
- `at_match_hit_tokens`: the same, asked when the instance admitted the request (the
  events of every step before it applied): this is what the events can tell;
- `full_only_hit_tokens`: the full-attention prefix at admission, what a full-only stream
  promises then (it over-predicts by the pages no SWA window or Mamba state resumes from).

Where the prediction exceeded the admission figure, by how much, in two parts:

- `predicted_unprefilled_tokens`: predicted past the full prefix held at admission (a prompt
  in flight that had not finished its prefill then, or full pages evicted since routing);
- `predicted_unresumable_tokens`: predicted inside that full prefix but past the resumable
  one (a window or state evicted since routing, or never placed at that boundary).

The actual hits are the instance's own (`hit_tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from uniradix.event_sink import MEDIA
from uniradix.events.index import KVEventIndex

FIELDS = (
    "predicted_hit_tokens",
    "indexed_hit_tokens",
    "at_match_hit_tokens",
    "full_only_hit_tokens",
    "predicted_unprefilled_tokens",
    "predicted_unresumable_tokens",
)


class HitPredictions:
    def __init__(self, index: KVEventIndex, names: Sequence[str]) -> None:
        self.index = index
        self.names = list(names)
        self.totals = [dict.fromkeys(FIELDS, 0) for _ in self.names]
        # (instance, local rid) -> (page hashes, predicted tokens)
        self._routed: dict[tuple[int, int], tuple[list[int], int]] = {}

    def routed(
        self, instance: int, rid: int, tokens: np.ndarray, expected_pages: int | None
    ) -> None:
        """Request `rid` (the instance's own numbering) went to `instance`;
        `expected_pages`: what the router expected, when it says."""
        index, name = self.index, self.names[instance]
        hashes = index.page_hashes(tokens)
        indexed = index.resumable_lengths(tokens, MEDIA, hashes=hashes)[name]
        predicted = indexed if expected_pages is None else expected_pages * index.block_size
        self._routed[(instance, rid)] = (hashes, predicted)
        t = self.totals[instance]
        t["indexed_hit_tokens"] += indexed
        t["predicted_hit_tokens"] += predicted

    def admitted(self, instance: int, rid: int) -> None:
        """`rid` was admitted on `instance` for the first time."""
        routed = self._routed.pop((instance, rid), None)
        if routed is None:
            return
        (hashes, predicted), name = routed, self.names[instance]
        index, t = self.index, self.totals[instance]
        at_match = index.resumable_lengths((), MEDIA, hashes=hashes)[name]
        full = index.resumable_lengths((), MEDIA, hashes=hashes, groups=False)[name]
        t["at_match_hit_tokens"] += at_match
        t["full_only_hit_tokens"] += full
        t["predicted_unprefilled_tokens"] += max(0, predicted - full)
        t["predicted_unresumable_tokens"] += max(0, min(predicted, full) - at_match)
