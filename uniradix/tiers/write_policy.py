"""Write policies of the host tier: when a device-resident node gets its host copy.

- `write_through`: at insert, the new node and its ancestors without a host copy;
- `write_through_selective`: the same, once a node has been hit `selective_hits` times
  (an insert reusing it counts as a hit);
- `write_back`: never at insert; a device-leaf victim is backed up at eviction, so it is
  demoted (host-only, still matchable) instead of lost.
"""

from __future__ import annotations

import enum


class WritePolicy(enum.Enum):
    WRITE_THROUGH = "write_through"
    WRITE_THROUGH_SELECTIVE = "write_through_selective"
    WRITE_BACK = "write_back"

    @classmethod
    def parse(cls, name: str | WritePolicy) -> WritePolicy:
        if isinstance(name, WritePolicy):
            return name
        try:
            return cls(name)
        except ValueError:
            choices = ", ".join(p.value for p in cls)
            raise ValueError(f"unknown write policy {name!r}; choose one of {choices}") from None

    def backup_threshold(self, selective_hits: int) -> int | None:
        """Hits a node needs before an insert backs it up; None: inserts never back up."""
        if self is WritePolicy.WRITE_BACK:
            return None
        return selective_hits if self is WritePolicy.WRITE_THROUGH_SELECTIVE else 0
