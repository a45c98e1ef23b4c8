"""The uniradix TreeCore with SGLang's test-only inspection interface, so SGLang's test kit
(`build_fixture`) accepts it. Tree-shape reads are answered from uniradix's tree; the
host-tier and white-box setters refuse by name, as the core does."""

from __future__ import annotations

from typing import Any

import torch
from sglang.test.kits.unified_radix_cache.unified_tree_core_inspection_interface import (
    UnifiedTreeCoreInspectionInterface,
)

from uniradix.integrations.sglang.core import UniradixTreeCore
from uniradix.integrations.sglang.keys import to_tensor
from uniradix.integrations.sglang.refused import _refused


class UniradixInspector(UniradixTreeCore, UnifiedTreeCoreInspectionInterface):
    def contains_node(self, node_id: int) -> bool:
        return node_id in self._nodes

    def get_parent_node_id(self, node_id: int) -> int | None:
        parent = self._node(node_id).parent
        return None if parent is None else parent.id

    def get_child_node_ids(self, node_id: int) -> list[int]:
        return [c.id for c in self._node(node_id).children.values()]

    def get_node_key_length(self, node_id: int) -> int:
        return self._node(node_id).num_tokens

    def get_node_token_ids(self, node_id: int) -> list[int]:
        import numpy as np

        return [int(t) for t in np.frombuffer(self._node(node_id).key, dtype="<i8")]

    def is_node_key_bigram(self, node_id: int) -> bool:
        return False

    def get_component_device_lock_ref(self, node_id: int, component_type: Any) -> int:
        index = self._index(component_type)
        return 0 if index is None else self._node(node_id).data[index].lock_ref

    def get_node_hit_count(self, node_id: int) -> int:
        return self._node(node_id).hit_count

    def is_device_evictable_leaf(self, node_id: int) -> bool:
        return self._node(node_id) in self.tree.leaves

    def is_device_leaf(self, node_id: int) -> bool:
        node = self._node(node_id)
        return node.parent is not None and not node.children

    def get_all_node_ids(self) -> list[int]:
        return list(self._nodes)

    def get_component_host_value(self, node_id: int, component_type: Any) -> Any:
        index = self._index(component_type)
        value = None if index is None else self._node(node_id).data[index].host_value
        if value is None or isinstance(value, torch.Tensor):  # Mamba: the controller's tensor
            return value
        return to_tensor(value, torch.device("cpu"))

    def get_component_host_lock_ref(self, node_id: int, component_type: Any) -> int:
        index = self._index(component_type)
        return 0 if index is None else self._node(node_id).data[index].host_lock_ref

    def get_write_through_pending_id(self, node_id: int) -> int | None:
        return self._write_pending.get(node_id)

    def is_host_evictable_leaf(self, node_id: int) -> bool:
        return self._is_host_leaf(self._node(node_id))

    def build_backup_node_ids(self, node_id: int, write_back: bool = False) -> list[int]:
        if write_back:
            return [node_id]
        return list(self.build_backup_kv_action(node_id).node_ids)


_REFUSED = sorted(
    name
    for name in UnifiedTreeCoreInspectionInterface.__abstractmethods__
    if name not in vars(UniradixInspector)
    and (
        not hasattr(UniradixTreeCore, name)
        or getattr(getattr(UniradixTreeCore, name), "__isabstractmethod__", False)
    )
)
for _name in _REFUSED:
    setattr(UniradixInspector, _name, _refused(_name, "white-box access to SGLang's host tier"))
UniradixInspector.__abstractmethods__ = frozenset()
