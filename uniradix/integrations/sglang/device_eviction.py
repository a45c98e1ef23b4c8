"""SGLang's device eviction walk on the uniradix TreeCore: `evict_device_start`, then
`evict_device_next_node` until the tracker reaches the quota (FULL: the least valuable
evictable leaf; SWA and Mamba: their own walks in `swa.py` and `mamba.py`, which may hold a
state back for a write-back backup), `evict_device_leaf` for each leaf the controller frees,
and `evict_device_end`. With HiCache on, a leaf's eviction is the host tier's (demote or
delete, `host.py`).
"""

from __future__ import annotations

from typing import Any

from uniradix.integrations.sglang.host import FULL
from uniradix.integrations.sglang.host_mamba import MAMBA
from uniradix.integrations.sglang.host_storage import HostStorage
from uniradix.integrations.sglang.host_swa import SWA
from uniradix.integrations.sglang.keys import to_tensor
from uniradix.integrations.sglang.results import leaf_result, next_node_result
from uniradix.integrations.sglang.swa import SWA_INDEX


class DeviceEviction(HostStorage):
    _walk_quota: int  # the FULL walk's quota, set by `evict_device_start`

    def evict_device_start(self, component_type: Any, request_cnt: int) -> None:
        self._walk_quota = request_cnt
        if component_type == SWA and self.swa is not None:
            self.swa.evict_start(request_cnt)
        elif component_type == MAMBA and self.mamba is not None:
            self.mamba.evict_start(request_cnt)

    def evict_device_next_node(self, component_type: Any, tracker: dict[Any, int]) -> Any:
        result = next_node_result()
        if component_type == FULL and tracker.get(FULL, 0) < self._walk_quota:
            leaf = self.tree.leaves.pop()
            if leaf is not None:
                result.node_id, result.made_progress = leaf.id, True
        else:
            walk = self.swa if component_type == SWA else self.mamba
            if walk is None:
                return result
            frees, done = result.device_frees, tracker.get(component_type, 0)
            leaf = walk.evict_next(done, frees, result.tracker)
            held = walk.deferred  # write-back: the controller backs its node up first
            if leaf is not None:
                result.node_id = leaf.id
            if held is not None:
                self._report_held_back(result, component_type, held)
            result.made_progress = leaf is not None or held is not None or bool(result.tracker)
        return result

    def evict_device_leaf(self, node_id: int, is_write_back: bool) -> Any:
        node = self._node(node_id)
        if not self.tree.is_evictable_leaf(node):
            raise ValueError(f"node {node_id} is not an evictable device leaf")
        if self.enable_hicache:
            return self._evict_device_leaf_host(node, is_write_back)
        value = node.data[0].value
        assert value is not None
        result = leaf_result()
        if self._events is not None:
            self._events.removed(node)
        full = to_tensor(value, self.device)
        result.device_frees[FULL].append(full)
        result.tracker[FULL] = len(value)
        self._evictable -= node.num_tokens
        if self.swa is not None and node.data[SWA_INDEX].value is not None:
            # The full slots name the SWA peers to free (`SwaTree.drop`), as a tensor once.
            result.tracker[SWA] = self.swa.release(node, full, SWA, result.device_frees)
        if self.mamba is not None and node.data[self.mamba.index].value is not None:
            result.tracker[MAMBA] = self.mamba.drop(node, result.device_frees)
        node.data[0].value = None
        self.tree.remove_leaf(node)
        del self._nodes[node_id]
        return result

    def evict_device_end(self, component_type: Any) -> None:
        self._walk_quota = 0
        self._requeue_kept_leaves()
        if component_type == SWA and self.swa is not None:
            self.swa.evict_end()
        elif component_type == MAMBA and self.mamba is not None:
            self.mamba.evict_end()

    def evict_excess_path_states(
        self, tail_node_id: int, device_frees: Any, host_frees: Any, cache_actions: Any
    ) -> None:
        if self.mamba is not None:
            self.mamba.evict_excess(self._node(tail_node_id), device_frees)
