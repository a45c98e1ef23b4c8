"""Holds a conversation's next turn at the router until its previous turn is prefilled.

A trace without `after` links (a Mooncake trace) can hand the router a prompt that holds the
whole of a prompt still being prefilled somewhere. Routed at once, it is matched before the
earlier prompt's pages are cached and recomputes them (in a real service the next turn
cannot come before the previous answer). The gate keeps such a prompt back until every
routed prompt it holds whole has finished its prefill and been published, so the router
sees those pages in the index and the instance finds them in its tree.

A prompt is "held whole" when the chained hash of the earlier prompt's last whole page is
among the new prompt's page hashes (the hashes chain from the root, so equal hashes mean
equal prefixes).
"""

from __future__ import annotations

from collections import Counter


class TurnGate:
    def __init__(self, num_instances: int) -> None:
        # Per instance: local rid -> last page hash, for routed prompts not yet prefilled.
        self._pending: list[dict[int, int]] = [{} for _ in range(num_instances)]
        self._ends: Counter[int] = Counter()  # last page hashes of those prompts
        self._held: dict[int, list[int]] = {}  # last page hash -> cluster rids waiting on it

    @property
    def holding(self) -> int:
        return sum(len(rids) for rids in self._held.values())

    def hold(self, rid: int, hashes: list[int]) -> bool:
        """Keeps cluster request `rid` back (True) when its prompt, of page `hashes`, holds
        the whole of a prompt still being prefilled; it comes back from `released`."""
        for h in reversed(hashes):  # the deepest: the turn it continues directly
            if h in self._ends:
                self._held.setdefault(h, []).append(rid)
                return True
        return False

    def routed(self, instance: int, rid: int, hashes: list[int]) -> None:
        """Request `rid` (the instance's numbering) of page `hashes` went to `instance`."""
        if hashes:
            self._pending[instance][rid] = hashes[-1]
            self._ends[hashes[-1]] += 1

    def pending(self, instance: int) -> dict[int, int]:
        """`instance`'s routed prompts not yet prefilled (local rid -> last page hash)."""
        return self._pending[instance]

    def prefilled(self, instance: int, rid: int) -> list[int]:
        """Request `rid` of `instance` finished its prefill (and its pages are published);
        returns the cluster rids no longer held for it."""
        end = self._pending[instance].pop(rid, None)
        if end is None:
            return []
        self._ends[end] -= 1
        if self._ends[end] > 0:
            return []
        del self._ends[end]
        return self._held.pop(end, [])
