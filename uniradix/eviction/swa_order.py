"""What an SWA component tells its eviction order, and the serve marks every order keeps.

An SWA window serves a hit only if a later request's match ends right under it, so an order
of SWA windows learns from the component where matches ended (`served`), which windows an
insert stored or touched (`refreshed`), which a request's decode outputs left
(`inserted_past_checkpoints`), where a running request is (`request_step`), and when a node
is split or its window evicted (`split`, `forget`). `candidates` yields victims, best first.
The default order (`uniradix.eviction.swa_past`) and any registered one
(`uniradix.eviction.orders`) subclass `SWAOrder`; `lru` needs no order object.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from uniradix.eviction.aux_eviction import EvictingComponent
from uniradix.tree.node import TreeNode
from uniradix.types import Req

SCAN: int | None = 64  # least credited windows searched for one without evidence (None: all)


class SWAOrder:
    """Base of an SWA component's eviction order: no-op hooks and the set of windows that
    served a match; subclasses define `candidates`."""

    def __init__(self, component: EvictingComponent) -> None:
        self.component = component
        self._served: set[TreeNode] = set()

    def served(self, node: TreeNode, depth: int, window_end: int) -> None:
        """A match ended `window_end` units deep, within one window below `node`, which ends
        `depth` units deep."""
        self._served.add(node)

    def was_served(self, node: TreeNode) -> bool:
        return node in self._served

    def refreshed(self, node: TreeNode, depth: int, window_end: int) -> None:
        """An insert ending `window_end` units deep stored or touched `node`'s window (ending
        `depth` units deep)."""

    def inserted_past_checkpoints(
        self, node: TreeNode, end: int, checkpoints: Sequence[int], walked: int
    ) -> None:
        """An insert ending at `node` (`end` units deep) was made by a request with
        `checkpoints` (`Req.checkpoint_seqlens`): the nodes past the last hold its decode
        outputs' window. The insert refreshed the windows of the nodes ending deeper than
        `walked` (one window and a page below `end`), not those above."""

    def request_step(self, req: Req) -> None:
        """`req` is running (called at each of its out-of-window steps)."""

    def split(self, parent: TreeNode, child: TreeNode) -> None:
        """`parent` was split off `child`'s window: it served what the child served."""
        if child in self._served:
            self._served.add(parent)

    def forget(self, node: TreeNode) -> None:
        self._served.discard(node)

    def reset(self) -> None:
        self._served.clear()

    def candidates(self) -> Iterator[TreeNode]:
        raise NotImplementedError

    def check_invariants(self, errors: list[str]) -> None:
        """Serve marks are kept for live windows only (dropped at eviction)."""
        i = self.component.index
        stale = [n.id for n in self._served if n.data[i].value is None]
        if stale:
            errors.append(f"swa order: serve marks kept for nodes {stale} holding no window")
