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
            cls = self._loaded[name] = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        return cls

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
