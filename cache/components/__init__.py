"""Components and their registry: a new component is one folder plus one line here.

Each entry names its class as ``module:Class`` so that checking a config (a scenario
file in the CLI) never imports torch; a class loads the first time it is looked up.
A component with a part in the host tier (HiCache) names it second: the class its
component mixes in (its ``<name>/host.py``, torch-free, see base_host.py), which the
config reads for its host pool's size field and default.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

_ENTRIES = {
    "full": ".full.component:FullComponent",
    "swa": (".swa.component:SWAComponent", ".swa.host:SWAHostMixin"),
    "mamba": (".mamba.component:MambaComponent", ".mamba.host:MambaHostMixin"),
    "sidecar": (".sidecar.component:SidecarComponent", ".sidecar.host:SidecarHostMixin"),
}


class ComponentRegistry(Mapping):
    """name -> component class, imported on first lookup; names are known up front."""

    def __init__(self, entries: dict[str, str | tuple[str, str]]) -> None:
        self._entries = {name: (e,) if isinstance(e, str) else tuple(e) for name, e in entries.items()}
        self._loaded: dict[str, type] = {}

    def __getitem__(self, name: str) -> type:
        cls = self._loaded.get(name)
        if cls is None:
            cls = self._loaded[name] = _load(self._entries[name][0])
        return cls

    def host_part(self, name: str) -> type | None:
        """The component's host part (imported without its component), or None."""
        entry = self._entries[name]
        return _load(entry[1]) if len(entry) > 1 else None

    def register(self, name: str, component: type | str) -> None:
        """Add a component at run time: a class, or ``"package.module:Class"`` (imported
        on first lookup). Its ``name`` must be the registry name."""
        if name in self._entries:
            raise ValueError(f"component {name!r} is already registered")
        if isinstance(component, str):
            if ":" not in component:
                raise ValueError(f"expected 'module:Class', got {component!r}")
            self._entries[name] = (component,)
            return
        if getattr(component, "name", None) != name:
            raise ValueError(f"{component.__name__}.name is {getattr(component, 'name', None)!r}, not {name!r}")
        self._entries[name] = (f"{component.__module__}:{component.__qualname__}",)
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


def _load(path: str) -> type:
    module, _, attr = path.partition(":")
    # ".swa.component" is a module of this package; "package.module" an absolute one
    return getattr(importlib.import_module(module, package=__name__), attr)


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
