"""`benchmarks.studies.swa_pool_contents` names each live SWA window by its oracle next use, the
order's serve and pass marks, leaf or inner, and its lock."""

import numpy as np

from benchmarks.studies.retired_orders import GREEDY_DUAL
from benchmarks.studies.swa_pool_contents import window_class
from benchmarks.swa_oracle import NEVER
from tests.driver import MiniScheduler
from tests.eviction.test_swa_reuse import match, swa_cache
from uniradix.components.swa import SWAComponent
from uniradix.tree.node import TreeNode
from uniradix.types import ComponentType


class FixedUses:
    """An oracle stand-in: the nodes in `used` have a next use, the others none."""

    def __init__(self, used: set[TreeNode]) -> None:
        self.used = used

    def next_use(self, node: TreeNode) -> int:
        return 0 if node in self.used else NEVER


def test_windows_are_named_by_use_serve_pass_and_lock() -> None:
    """Window 4, page 1: a 16-token prompt prefilled in two chunks of 8 with its checkpoint at
    16 (its chunk-end window [104..107] is passed), then a match of the first 8 tokens (it
    ends under that window: served, no longer only passed) while the request still runs."""
    cache = swa_cache(GREEDY_DUAL)
    swa = cache.component(ComponentType.SWA)
    assert isinstance(swa, SWAComponent)
    sched = MiniScheduler(cache)
    req = sched.prefill_in_chunks(list(range(100, 116)), 8, checkpoints=(16,))
    by_first = {int(np.frombuffer(n.key, dtype="<i8")[0]): n for n in swa.lru}
    leaf, passed = by_first[112], by_first[104]
    oracle = FixedUses({leaf})
    names = {first: window_class(swa, n, oracle) for first, n in by_first.items()}  # type: ignore[arg-type]
    assert names[104] == "never used, never served, passed, inner"
    assert names[112] == "locked, used later, never served, leaf"
    assert names[100] == "never used, never served, inner"
    assert match(cache, list(range(100, 108))) == 8
    assert window_class(swa, passed, oracle) == "never used, served, passed, inner"  # type: ignore[arg-type]
    sched.finish(req)
    assert window_class(swa, leaf, oracle).startswith("used later")  # type: ignore[arg-type]
