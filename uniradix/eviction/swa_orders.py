"""The eviction order object of an SWA component, by `swa_eviction_policy` name."""

from __future__ import annotations

from uniradix.eviction.aux_eviction import EvictingComponent
from uniradix.eviction.swa_credit import SWACreditEviction, SWAWindowCreditEviction
from uniradix.eviction.swa_output import SWAOutputCreditEviction
from uniradix.eviction.swa_reuse import SWAReuseEviction


def swa_order(
    component: EvictingComponent, policy: str, window_tail: int
) -> SWAReuseEviction | None:
    """The order object of an SWA component under `policy` (None: plain LRU); `window_tail`:
    its window rounded up to whole pages."""
    if policy == "reuse_aware":
        return SWAReuseEviction(component)
    if policy == "greedy_dual":
        return SWACreditEviction(component, window_tail)
    if policy == "greedy_dual_window":
        return SWAWindowCreditEviction(component, window_tail)
    if policy == "greedy_dual_output":
        return SWAOutputCreditEviction(component, window_tail)
    return None
