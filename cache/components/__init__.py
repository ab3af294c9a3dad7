"""Components and their registry: a new component is one file plus one line here.

Each entry names its class as ``module:Class`` so that checking a config (a scenario
file in the CLI) never imports torch; a class loads the first time it is looked up.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

_ENTRIES = {
    "full": "full:FullComponent",
    "swa": "swa:SWAComponent",
    "mamba": "mamba:MambaComponent",
    "sidecar": "sidecar:SidecarComponent",
}


class ComponentRegistry(Mapping):
    """name -> component class, imported on first lookup; names are known up front."""

    def __init__(self, entries: dict[str, str]) -> None:
        self._entries = dict(entries)
        self._loaded: dict[str, type] = {}

    def __getitem__(self, name: str) -> type:
        cls = self._loaded.get(name)
        if cls is None:
            module, _, attr = self._entries[name].partition(":")
            package = None if "." in module else __name__  # a bare name is a module of this package
            cls = getattr(importlib.import_module(module if package is None else f"{package}.{module}"), attr)
            self._loaded[name] = cls
        return cls

    def register(self, name: str, component: type | str) -> None:
        """Add a component at run time: a class, or ``"package.module:Class"`` (imported
        on first lookup). Its ``name`` must be the registry name."""
        if name in self._entries:
            raise ValueError(f"component {name!r} is already registered")
        if isinstance(component, str):
            if ":" not in component:
                raise ValueError(f"expected 'module:Class', got {component!r}")
            self._entries[name] = component
            return
        if getattr(component, "name", None) != name:
            raise ValueError(f"{component.__name__}.name is {getattr(component, 'name', None)!r}, not {name!r}")
        self._entries[name] = f"{component.__module__}:{component.__qualname__}"
        self._loaded[name] = component

    def unregister(self, name: str) -> None:
        """Forget a component added with ``register`` (tests clean up with it)."""
        if name in _ENTRIES:
            raise ValueError(f"{name!r} is a built-in component")
        self._entries.pop(name)
        self._loaded.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


COMPONENT_REGISTRY = ComponentRegistry(_ENTRIES)
_CLASSES = {"FullComponent": "full", "SWAComponent": "swa", "MambaComponent": "mamba"}


def __getattr__(name: str):
    if name in _CLASSES:
        return COMPONENT_REGISTRY[_CLASSES[name]]
    if name == "TreeComponent":
        from .base import TreeComponent

        return TreeComponent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COMPONENT_REGISTRY", "ComponentRegistry", "FullComponent", "MambaComponent", "SWAComponent", "TreeComponent"]
