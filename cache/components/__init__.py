"""Components and their registry: a new component is one folder plus its name here.

Each component's folder declares its parts in its ``__init__``, torch-free, as paths
relative to the folder: ``COMPONENT`` (``module:Class``, its device part), and, when it
has them, ``HOST_PART`` (the class its component mixes in for the host tier, see
base_host.py: the config reads its host pool's size field and default), ``CHECKS``
(a module of its invariants and match proof, which the checker calls; the component
never imports it) and ``FIELDS`` (a module of its [config] fields' defaults and rules,
which the config checks a given value by before a cache is built). A part loads the
first time it is asked for, so checking a config (a scenario file in the CLI) never
imports torch. Below its parts a folder may declare facts the workbench reads instead
of naming components (``declared``, ``declaring``): docs/how-to/extend-the-cache.md.

A folder also declares the facts the rooms outside it ask for instead of testing its
name (each optional; read by ``declared`` and the helpers below it): ``EVICT_FIELD``
(the EvictParams field its eviction count goes to; EvictResult's is it plus
``_evicted``), ``CALLS`` (the cache calls that need it, SGLang's names), ``POOL_BOUND``
(the most units its pools' size fields may give), ``TURNS_OFF`` (the config options the
cache ignores when it is a component) and ``IN_STORAGE`` (the storage tier keeps its data).

May import: ``basics``, ``observe``, ``pools``, ``tree``.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Optional

from ..basics import evict_fields
from ..basics.limits import HOST_FACTOR, MAX_POOL

_BUILT_IN = ("full", "swa", "mamba", "sidecar")  # each a folder of this package, in this order


@dataclasses.dataclass(frozen=True)
class Parts:
    """Where a component's parts live: ``module:Class`` for the classes, a module for
    the others (absolute, or relative to this package); None: it has none."""

    component: str
    host_part: Optional[str] = None
    checks: Optional[str] = None
    fields: Optional[str] = None

    @classmethod
    def of_folder(cls, folder: str) -> Parts:
        """The parts a component's folder declares (its ``__init__``'s constants)."""
        declared = importlib.import_module(folder, package=__name__)

        def part(name: str) -> Optional[str]:
            path = getattr(declared, name, None)
            return None if path is None else f"{folder}{path}"

        return cls(part("COMPONENT"), part("HOST_PART"), part("CHECKS"), part("FIELDS"))


class ComponentRegistry(Mapping):
    """name -> component class, imported on first lookup; names are known up front.
    Also each component's other parts: ``host_part``, ``checks``, ``fields``."""

    def __init__(self, built_in: tuple[str, ...]) -> None:
        self._built_in = frozenset(built_in)
        self._parts: dict[str, Optional[Parts]] = dict.fromkeys(built_in)  # None: its folder not read yet
        self._loaded: dict[tuple[str, str], object] = {}

    def parts(self, name: str) -> Parts:
        found = self._parts[name]
        if found is None:
            found = self._parts[name] = Parts.of_folder(f".{name}")
        return found

    def _part(self, name: str, part: str):
        key = (name, part)
        if key not in self._loaded:
            path = getattr(self.parts(name), part)
            self._loaded[key] = None if path is None else _load(path)
        return self._loaded[key]

    def __getitem__(self, name: str) -> type:
        return self._part(name, "component")

    def host_part(self, name: str) -> Optional[type]:
        """The component's host part (imported without its component), or None."""
        return self._part(name, "host_part")

    def checks(self, name: str) -> Optional[ModuleType]:
        """The module of the component's checks (``check``, ``probe``, ``verify_match``,
        ``check_host``, ``probe_host``; each optional), or None."""
        return self._part(name, "checks")

    def fields(self, name: str) -> Optional[ModuleType]:
        """The torch-free module of the component's [config] fields (``FIELDS``: field
        -> default; ``check(field, value, page_size)``), or None."""
        return self._part(name, "fields")

    def declared(self, name: str, constant: str, default=None):
        """A constant the component's folder declares (its ``__init__``, torch-free), or
        ``default`` when it declares none. A component registered at run time has no
        folder here: the module its class lives in declares its constants, if any."""
        key = (name, "declaring")
        module = self._loaded.get(key)
        if module is None:  # looked up once: the ops ask on every step
            declaring = f".{name}" if name in self._built_in else self.parts(name).component.partition(":")[0]
            module = self._loaded[key] = importlib.import_module(declaring, package=__name__)
        return getattr(module, constant, default)

    def declaring(self, constant: str) -> tuple[str, ...]:
        """The components whose folder declares ``constant`` true, in registry order."""
        return tuple(name for name in self._parts if self.declared(name, constant))

    def register(self, name: str, component: type | str, checks: Optional[str] = None) -> None:
        """Add a component at run time: a class, or ``"package.module:Class"`` (imported
        on first lookup). Its ``name`` must be the registry name. ``checks``: the module
        of its checks ("package.module"), if it has any."""
        if name in self._parts:
            raise ValueError(f"component {name!r} is already registered")
        if isinstance(component, str):
            if ":" not in component:
                raise ValueError(f"expected 'module:Class', got {component!r}")
            self._parts[name] = Parts(component, checks=checks)
            return
        if getattr(component, "name", None) != name:
            raise ValueError(f"{component.__name__}.name is {getattr(component, 'name', None)!r}, not {name!r}")
        self._parts[name] = Parts(f"{component.__module__}:{component.__qualname__}", checks=checks)
        self._loaded[(name, "component")] = component

    def unregister(self, name: str) -> None:
        """Forget a component added with ``register`` (tests clean up with it)."""
        if name in self._built_in:
            raise ValueError(f"{name!r} is a built-in component")
        del self._parts[name]
        for key in [key for key in self._loaded if key[0] == name]:
            del self._loaded[key]

    def evict_fields(self) -> dict[str, str]:
        """Component -> the EvictParams field its count goes to, where its folder names one."""
        return {name: field for name in self if (field := self.declared(name, "EVICT_FIELD")) is not None}

    def offering(self, call: str) -> Optional[str]:
        """The component the cache call ``call`` needs (its folder's ``CALLS``), or None."""
        return next((name for name in self if call in self.declared(name, "CALLS", ())), None)

    def size_bound(self, field: str) -> int:
        """The most units a size field may give: its component's ``POOL_BOUND`` (the
        field names it: ``<name>_size``, ``host_<name>_size``) or any pool's bound; a
        host pool's (``host_...``) is ``HOST_FACTOR`` times it."""
        words = field.split("_")
        bound = next((b for name in self if name in words and (b := self.declared(name, "POOL_BOUND"))), MAX_POOL)
        return bound * HOST_FACTOR if field.startswith("host_") else bound

    def turned_off(self, components) -> frozenset[str]:
        """The config options the cache ignores with these components (their ``TURNS_OFF``)."""
        return frozenset(option for name in components for option in self.declared(name, "TURNS_OFF", ()))

    def stored_components(self) -> tuple[str, ...]:
        """The components whose data the storage tier keeps (their folders' ``IN_STORAGE``)."""
        return tuple(name for name in self if self.declared(name, "IN_STORAGE", False))

    def __contains__(self, name: object) -> bool:
        return name in self._parts

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)


def _load(path: str):
    """``module:attr`` -> the attribute; a plain module path -> the module. A path that
    starts with a dot is a module of this package, any other an absolute one."""
    module, _, attr = path.partition(":")
    loaded = importlib.import_module(module, package=__name__)
    return getattr(loaded, attr) if attr else loaded


COMPONENT_REGISTRY = ComponentRegistry(_BUILT_IN)
evict_fields.declare(COMPONENT_REGISTRY.evict_fields())
_CLASSES = {"FullComponent": "full", "SWAComponent": "swa", "MambaComponent": "mamba"}


def __getattr__(name: str):
    if name in _CLASSES:
        return COMPONENT_REGISTRY[_CLASSES[name]]
    if name == "TreeComponent":
        from .base import TreeComponent

        return TreeComponent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COMPONENT_REGISTRY", "ComponentRegistry", "FullComponent", "MambaComponent", "Parts", "SWAComponent",
           "TreeComponent"]
