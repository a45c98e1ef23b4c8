"""Which class implements each component type; a cache may override entries for itself.

Built-in types are `ComponentType` members. A component written outside the package declares
a name (`component_type = "mine"`) and is registered, in the default registry or in a
`ComponentRegistry` of one's own, then named in a cache's component list like a built-in::

    @register_component
    class MyComponent(TreeComponent):
        component_type = "mine"
        ...

    cache = UnifiedRadixCache(pools, settings, (ComponentType.FULL, "mine"))

(`examples/` in the repository has a worked example.)

A class may also be given directly in the component list (no registration needed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from uniradix.components.base import TreeComponent
from uniradix.components.full import FullComponent
from uniradix.components.mamba import MambaComponent
from uniradix.components.swa import SWAComponent
from uniradix.types import ComponentKey, ComponentType

COMPONENT_REGISTRY: dict[ComponentType, type[TreeComponent]] = {
    ComponentType.FULL: FullComponent,
    ComponentType.MAMBA: MambaComponent,
    ComponentType.SWA: SWAComponent,
}

ComponentSpec = ComponentKey | type[TreeComponent]
"""An entry of a cache's component list: a built-in type, a registered name, or a class."""

C = TypeVar("C", bound=type[TreeComponent])


class ComponentRegistry:
    """Component classes by name. The built-in names ("full", "swa", "mamba") always resolve
    to the built-in types; other names to the classes registered under them."""

    def __init__(self, classes: Mapping[str, type[TreeComponent]] | None = None) -> None:
        self._classes: dict[str, type[TreeComponent]] = {}
        for name, cls in (classes or {}).items():
            self.register(cls, name)

    def register(self, cls: C, name: str | None = None) -> C:
        """Registers `cls` under `name` (default: its `component_type`); returns `cls`, so it
        serves as a class decorator. Re-registering a name with another class raises."""
        if not isinstance(cls, type) or not issubclass(cls, TreeComponent):
            raise TypeError(f"a component class must subclass TreeComponent, got {cls!r}")
        key = name if name is not None else cls.component_type
        if not isinstance(key, str) or not key or isinstance(key, ComponentType):
            raise ValueError(
                f"{cls.__name__}: an external component needs a str name (component_type), "
                f"got {key!r}"
            )
        if key in _BUILTIN_NAMES:
            raise ValueError(f"{key!r} names a built-in component type")
        known = self._classes.get(key)
        if known is not None and known is not cls:
            raise ValueError(f"component name {key!r} is already registered to {known.__name__}")
        self._classes[key] = cls
        return cls

    def names(self) -> list[str]:
        return sorted(self._classes)

    def resolve(
        self,
        spec: ComponentSpec,
        override: Mapping[ComponentType, type[TreeComponent]] | None = None,
    ) -> type[TreeComponent]:
        if isinstance(spec, type):
            if not issubclass(spec, TreeComponent):
                raise TypeError(f"a component class must subclass TreeComponent, got {spec!r}")
            return spec
        key = normalize_key(spec)
        if isinstance(key, ComponentType):
            return component_class(key, override)
        try:
            return self._classes[key]
        except KeyError:
            raise ValueError(
                f"no component registered as {key!r}; registered: {self.names()}"
            ) from None

    def resolve_all(
        self,
        specs: Sequence[ComponentSpec],
        override: Mapping[ComponentType, type[TreeComponent]] | None = None,
    ) -> list[type[TreeComponent]]:
        """The classes of a cache's `specs`: FULL first, no type twice."""
        classes = [self.resolve(spec, override) for spec in specs]
        types = [cls.component_type for cls in classes]
        if not types or types[0] != ComponentType.FULL:
            raise ValueError(f"components must start with ComponentType.FULL, got {specs}")
        if len(set(types)) != len(types):
            raise ValueError(f"duplicate component types: {specs}")
        return classes


_BUILTIN_NAMES = {ct.name.lower(): ct for ct in ComponentType}

DEFAULT_REGISTRY = ComponentRegistry()


def register_component(cls: C, name: str | None = None) -> C:
    """Registers `cls` in the default registry (see `ComponentRegistry.register`)."""
    return DEFAULT_REGISTRY.register(cls, name)


def normalize_key(key: ComponentKey) -> ComponentKey:
    """A built-in name ("swa") as its `ComponentType`; anything else unchanged."""
    if isinstance(key, ComponentType):
        return key
    if not isinstance(key, str):
        raise TypeError(f"a component is named by a ComponentType or a str, got {key!r}")
    return _BUILTIN_NAMES.get(key, key)


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
