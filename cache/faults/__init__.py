"""The fault catalogue: named switches that re-introduce real upstream bugs into this
cache, so the workbench's checks and the fuzzer can be shown to catch them.

A scenario turns faults on with ``config.faults = ["name", …]``. A fault is installed
on one cache instance by replacing a method of that instance (or of one of its
components, allocators or its tree) with a faulty copy, so a cache without faults runs
exactly the code it always runs: zero cost when off. Each faulty copy calls
``fired(cache, name)`` whenever it actually behaves differently from the correct code,
so a run knows the first step where the fault mattered (the "first faulty step" of the
fuzzer's detection table).

The catalogue is data (name, source, components, summary) held by its modules —
``full``, ``swa``, ``mamba``, ``requests`` (retraction and abort), ``sessions`` (session
tags and streaming slots), ``keys`` (EAGLE keys), ``policies`` (the eviction policies),
``kv_events`` (the KV event stream) and ``storage`` (the prefetch from storage) — which import nothing heavy at import time:
checking a scenario's config never imports torch. Adding a fault is one ``Fault`` entry and its
installer in one of them.

The catalogue sits below ``config`` (a config names its faults) and patches instances
at run time, so it imports only what a faulty copy needs to build its records.
May import: ``basics``, ``observe``, ``pools``, ``tree``, ``components``, ``tiers``.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable
from typing import Optional

MODULES = ("full", "swa", "mamba", "requests", "sessions", "keys", "policies", "kv_events", "storage")


@dataclasses.dataclass(frozen=True)
class Fault:
    name: str  # kebab-case, what the bug does: "swa-recovery-stale-mapping"
    source: str  # the upstream report or fix: "sgl-project/sglang#27586"
    components: tuple[str, ...]  # the components the cache must have for the fault to apply
    summary: str  # one line: the wrong behaviour it brings back
    install: Callable  # install(cache) -> None: patch that cache instance
    sessions: bool = False  # it acts on sessions: the fuzzer searches it with the session ops drawn
    # the model options it lives under ((name, value) pairs: eviction_policy, is_eagle, …): the
    # fuzzer searches it with these in the config
    options: tuple = ()
    # a prefetch stop policy: it lives in the storage tier (hicache.storage), and the fuzzer
    # searches it on the storage configs with that policy
    storage: Optional[str] = None
    # it acts on the host tier (a backup, a load-back): the fuzzer searches it only on configs with one
    host_tier: bool = False


def catalogue() -> dict[str, Fault]:
    """Every fault, by name, in module order (MODULES)."""
    out: dict[str, Fault] = {}
    for module in MODULES:
        for fault in importlib.import_module(f"{__name__}.{module}").FAULTS:
            assert fault.name not in out, f"fault {fault.name} defined twice"
            out[fault.name] = fault
    return out


def check_fault_names(names: Iterable[str], components: Iterable[str]) -> None:
    """``ValueError`` naming the first unknown fault, or one the components cannot carry."""
    known = catalogue()
    have = set(components)
    for name in names:
        fault = known.get(name)
        if fault is None:
            raise ValueError(f"unknown fault {name!r}; urc fuzz --list-faults lists them")
        missing = [c for c in fault.components if c not in have]
        if missing:
            raise ValueError(f"fault {name!r} needs the {', '.join(missing)} component")


def install_faults(cache, names: Iterable[str]) -> None:
    """Patch ``cache`` (an instance, never the classes) with each named fault."""
    names = tuple(names)
    check_fault_names(names, cache.by_name)
    cache.fault_hits = dict.fromkeys(names, 0)
    known = catalogue()
    for name in names:
        known[name].install(cache)


def fired(cache, name: str) -> None:
    """A faulty copy just behaved differently from the correct code."""
    cache.fault_hits[name] += 1
