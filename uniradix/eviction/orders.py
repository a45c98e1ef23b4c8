"""The eviction orders of the auxiliary pools by name: `lru` and `reuse_credit` (the default)
for SWA windows (`swa_eviction_policy`) and for Mamba states (`aux_eviction_policy`).

One order per pool besides LRU, because a policy earns its place as a default only by winning
on traffic it was not tuned on, and the others did not (the judging half of the trace suite,
docs/hit_rates.md). `reuse_credit` is the same rule in both pools: what shows no sign of
reuse (a state or window on no path another request shared, never resumed from or served)
goes first, as segmented LRU and 2Q admit new pages on probation; the rest go by GreedyDual
credits, the hit each one saves weighted by its reuse (`uniradix.eviction.mamba_probation`,
`uniradix.eviction.swa_past`).

The retired names (`RETIRED`) raise ValueError naming the replacement; the default's former
names (`ALIASES`) still select it. Orders built outside the library (a study's copies of the
retired ones, `benchmarks/studies/retired_orders.py`) are added with `register_swa_order` /
`register_mamba_order` under a name with a prefix (`study:`), never a library name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from uniradix.eviction.aux_eviction import EvictingComponent
from uniradix.eviction.mamba_credit import MambaCreditOrder
from uniradix.eviction.mamba_probation import ProbationEviction
from uniradix.eviction.swa_order import SWAOrder
from uniradix.eviction.swa_past import SWAPastCreditEviction

LRU = "lru"
DEFAULT_ORDER = "reuse_credit"
ORDER_NAMES = (LRU, DEFAULT_ORDER)
# field -> former name of the default -> the name now
ALIASES = {
    "swa_eviction_policy": {"greedy_dual_output": DEFAULT_ORDER},
    "aux_eviction_policy": {"reuse_aware": DEFAULT_ORDER},
}
RETIRED = {
    "swa_eviction_policy": ("reuse_aware", "greedy_dual", "greedy_dual_window"),
    "aux_eviction_policy": ("branch_aware", "flop_aware"),
}


SWAOrderFactory = Callable[[EvictingComponent, int], SWAOrder]  # (component, window_tail)
MambaOrderFactory = Callable[[EvictingComponent], MambaCreditOrder]

_SWA_ORDERS: dict[str, SWAOrderFactory] = {DEFAULT_ORDER: SWAPastCreditEviction}
_MAMBA_ORDERS: dict[str, MambaOrderFactory] = {DEFAULT_ORDER: ProbationEviction}


def register_swa_order(name: str, factory: SWAOrderFactory) -> str:
    """Makes `name` (which must start with `study:`) select `factory`'s SWA order; returns it."""
    _SWA_ORDERS[_registrable(name)] = factory
    return name


def register_mamba_order(name: str, factory: MambaOrderFactory) -> str:
    """Makes `name` (which must start with `study:`) select `factory`'s Mamba order."""
    _MAMBA_ORDERS[_registrable(name)] = factory
    return name


def _registrable(name: str) -> str:
    if not name.startswith("study:"):
        raise ValueError(f"registered eviction order {name!r} must be named 'study:...'")
    return name


def _check(field: str, name: object, registered: Mapping[str, object]) -> str:
    if name in ALIASES[field]:
        return ALIASES[field][str(name)]
    if name in RETIRED[field]:
        raise ValueError(
            f"{field} {name!r} is retired from the library; use {DEFAULT_ORDER!r} (the "
            f"default, which replaces it) or {LRU!r}"
        )
    if name != LRU and name not in registered:
        raise ValueError(f"unknown {field} {name!r}; choose one of {list(ORDER_NAMES)}")
    return str(name)


def check_swa_eviction_policy(name: object) -> str:
    """The SWA order `name` selects (a former name of the default gives the current one)."""
    return _check("swa_eviction_policy", name, _SWA_ORDERS)


def check_aux_eviction_policy(name: object) -> str:
    """The Mamba order `name` selects (a former name of the default gives the current one)."""
    return _check("aux_eviction_policy", name, _MAMBA_ORDERS)


def swa_order(component: EvictingComponent, name: object, window_tail: int) -> SWAOrder | None:
    """The order object of an SWA component (None: plain LRU); `window_tail`: its window
    rounded up to whole pages."""
    name = check_swa_eviction_policy(name)
    return None if name == LRU else _SWA_ORDERS[name](component, window_tail)


def mamba_order(component: EvictingComponent, name: object) -> MambaCreditOrder | None:
    """The order object of a Mamba component (None: plain LRU)."""
    name = check_aux_eviction_policy(name)
    return None if name == LRU else _MAMBA_ORDERS[name](component)
