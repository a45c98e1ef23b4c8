"""Component lookup and per-component sizes: the part of `UnifiedRadixCache` a scheduler reads
to size its admissions."""

from __future__ import annotations

from uniradix.components.base import TreeComponent
from uniradix.components.registry import normalize_key
from uniradix.types import ComponentKey, ComponentType


class ComponentSizes:
    """Mixin of `UnifiedRadixCache`; `_by_type` is filled by its constructor."""

    _by_type: dict[ComponentKey, TreeComponent]

    def component(self, component_type: ComponentKey) -> TreeComponent:
        """The component of a built-in type, or of a registered name (\"swa\" works too)."""
        key = normalize_key(component_type)
        try:
            return self._by_type[key]
        except KeyError:
            name = key.name if isinstance(key, ComponentType) else key
            raise ValueError(f"this cache has no {name} component") from None

    def evictable_size(self, component_type: ComponentKey = ComponentType.FULL) -> int:
        return self.component(component_type).evictable_tokens

    def protected_size(self, component_type: ComponentKey = ComponentType.FULL) -> int:
        return self.component(component_type).protected_tokens

    def total_size(self) -> int:
        """Full-KV units held by the tree."""
        return self.evictable_size() + self.protected_size()
