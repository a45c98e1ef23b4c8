"""L3 storage of SWA windows on the uniradix TreeCore (HiCache storage of a FULL+SWA cache).

A backup to storage writes the whole pages of a node's SWA host copy under the node's last
page hashes (SGLang's trailing-pages policy); a prefetch stages one window's pages, which
SGLang's controller reads from storage before the prefetch's insert, and the commit spreads
them over the nodes that window covers, from the leaf the insert ended at up to the anchor:
a node with no SWA host copy takes its part (split first when the window starts inside it),
the other parts go back to the SWA host pool (`FreeComponentHostSlot`). The window is taken
whole or not at all: below an inner anchor a window shorter than the full one would miss its
head. Semantics are those of SGLang's Python core (its `SWAComponent`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer
from sglang.srt.mem_cache.unified_cache.cache_action import FreeComponentHostSlot
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

from uniradix.integrations.sglang.keys import to_slots
from uniradix.integrations.sglang.swa import SWA_INDEX, SwaTree
from uniradix.tree.core import TreeCore
from uniradix.tree.node import TreeNode

SWA = ComponentType.SWA
_TRAILING = PoolHitPolicy.TRAILING_PAGES


class SwaStorage:
    """The SWA pool's L3 transfers; `host_storage.py` routes SGLang's calls here."""

    tree: TreeCore
    swa: SwaTree | None
    page_size: int

    _node: Callable[[int], TreeNode]
    _take_split_actions: Callable[[], list[Any]]
    _swa_dropped: Callable[[TreeNode], None]

    def _swa_window_pages(self) -> int:
        assert self.swa is not None
        return -(-self.swa.window // self.page_size)

    def _swa_storage_backup(self, node: TreeNode, hashes: list[str] | None) -> list[Any]:
        """The whole pages of the node's SWA host copy, under its last page hashes."""
        host = None if self.swa is None else node.data[SWA_INDEX].host_value
        if host is None or not hashes:
            return []
        pages = len(host) // self.page_size
        if pages == 0:
            return []
        rows = torch.from_numpy(host[-pages * self.page_size :])
        return [
            PoolTransfer(
                PoolName.SWA, host_indices=rows, keys=hashes[-pages:], hit_policy=_TRAILING
            )
        ]

    def _swa_prefetch_transfer(self, staging_tokens: int) -> list[Any] | None:
        """The staged window's pages; SGLang's controller names their keys."""
        pages = staging_tokens // self.page_size
        if pages == 0:
            return None
        return [PoolTransfer(PoolName.SWA, keys=["__placeholder__"] * pages, hit_policy=_TRAILING)]

    def _swa_commit_prefetch(
        self, anchor: TreeNode, transfers: list[Any], actions: list[Any], inserted: Any, pools: Any
    ) -> None:
        if not transfers:
            return
        ps, host = self.page_size, transfers[0].host_indices
        pages = host.numel() // ps if host is not None else 0
        loaded = pools.extra_pool_hit_pages.get(PoolName.SWA, 0) if pools is not None else 0
        node_id = None if inserted is None else inserted.inserted_host_node
        target = None if node_id is None else self._node(node_id)
        short = anchor is not self.tree.root and pages < self._swa_window_pages()
        if short or target is None or pages == 0 or loaded < pages:
            _free_swa_host(host, actions)
            return
        start = inserted.total_len - pages * ps  # the staged pages cover [start, total_len)
        end, node = inserted.total_len, target
        while node is not anchor and end > start:
            node_start = end - node.num_tokens
            fill = max(node_start, start)
            part = host[fill - start : end - start]
            data = node.data[SWA_INDEX]
            if data.host_value is None and end > fill:
                if fill > node_start:  # the window starts inside: its part is the lower one
                    self.tree.split(node, fill - node_start)
                    actions.extend(self._take_split_actions())
                self._swa_attach_host(node, part)
            else:
                _free_swa_host(part, actions)
            end, node = node_start, node.parent  # type: ignore[assignment]
        if end > start:  # staged pages above the anchor
            _free_swa_host(host[: end - start], actions)

    def _swa_attach_host(self, node: TreeNode, host: torch.Tensor) -> None:
        data = node.data[SWA_INDEX]
        data.host_value = to_slots(host)
        if data.value is None:
            self._swa_dropped(node)  # listed while its window is on the host only
        self.tree.update_leaf(node)
        if node.parent is not None:
            self.tree.update_leaf(node.parent)


def _free_swa_host(host: torch.Tensor | None, actions: list[Any]) -> None:
    if host is not None and host.numel() > 0:
        actions.append(FreeComponentHostSlot([host], component_type=SWA))
