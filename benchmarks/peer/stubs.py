"""Empty stand-ins for GPU-only or front-end modules that SGLang imports at load time.

Only used inside the SGLang benchmark process, and only for packages that are not installed:
a CPU run never launches a kernel, renders a notebook or serves HTTP, so these modules are
imported but never exercised by the cache code measured here. Unknown attributes resolve to
a permissive callable (lower-case names: decorators such as `@jit` return the function
unchanged) or to a fresh class (CamelCase names: callers use them in `isinstance` checks
and as base classes).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

STUBBED = (
    "triton",
    "tvm_ffi",
    "IPython",
    "aiohttp",
    "torchvision",
    "sentencepiece",
    "compressed_tensors",
    "gguf",
    "partial_json_parser",
)


class _Anything:
    """A callable that accepts anything; used as a decorator it returns the decorated."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _Anything(self._name + "()")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(f"{self._name}.{name}")

    def __getitem__(self, item: Any) -> Any:
        return self

    def __iter__(self) -> Any:
        return iter(())

    def __bool__(self) -> bool:
        return False


class _AnyAttributeMeta(type):
    """Classes whose unknown class attributes are permissive values too (enum-like reads)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(f"{cls.__name__}.{name}")


class _Constructible:
    """Base of the stub classes: built with any arguments (`triton.Config(...)` at import)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value: Any
        if name[:1].isupper():
            value = _AnyAttributeMeta(name, (_Constructible,), {"__module__": self.__name__})
        else:
            value = _Anything(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0"
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _StubFinder(importlib.abc.MetaPathFinder):
    def __init__(self, roots: set[str]) -> None:
        self._roots = roots

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.split(".", 1)[0] not in self._roots:
            return None
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)


def _installed(name: str) -> bool:
    """Whether `name` is a real package: one a stub finder of an earlier call serves is not."""
    spec = importlib.util.find_spec(name)
    return spec is not None and not isinstance(spec.loader, _StubLoader)


def install_stubs(extra: tuple[str, ...] = ()) -> list[str]:
    """Stubs every package of `STUBBED` and `extra` that is not installed; returns their
    names, those an earlier call stubbed included, so that calls in any order agree on
    what is real. (`extra`: what SGLang's test kits import besides, e.g. `datasets`.)"""
    missing = {name for name in (*STUBBED, *extra) if not _installed(name)}
    sys.meta_path.insert(0, _StubFinder(missing))
    return sorted(missing)
