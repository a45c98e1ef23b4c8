"""Which class implements each component type; a cache may override entries for itself."""

from __future__ import annotations

from collections.abc import Mapping

from uniradix.components.base import TreeComponent
from uniradix.components.full import FullComponent
from uniradix.components.mamba import MambaComponent
from uniradix.components.swa import SWAComponent
from uniradix.types import ComponentType

COMPONENT_REGISTRY: dict[ComponentType, type[TreeComponent]] = {
    ComponentType.FULL: FullComponent,
    ComponentType.MAMBA: MambaComponent,
    ComponentType.SWA: SWAComponent,
}


def component_class(
    component_type: ComponentType,
    override: Mapping[ComponentType, type[TreeComponent]] | None = None,
) -> type[TreeComponent]:
    if override and component_type in override:
        return override[component_type]
    try:
        return COMPONENT_REGISTRY[component_type]
    except KeyError:
        raise ValueError(f"no component class registered for {component_type!r}") from None
