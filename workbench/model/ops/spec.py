"""What an op is, said once: its fields, results, needs, live syntax, executors (ours and
SGLang's), how the fuzzer draws it and how the recorder writes it.

Everything that knows ops — the scenario checks, the live parser and completion, the
cache driver, the bridge, the fuzzer, the shrinker, the recorder, ``why`` and the docs'
op table — reads these declarations, so an op is one module of ``ops/`` and nothing
else. A test can declare an op of its own and ``withdraw`` it afterwards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, Optional

from cache.components import COMPONENT_REGISTRY  # names and folder facts only: no torch

# field kinds: how a value is checked, parsed from a live command and shrunk
TOKENS = "tokens"  # a list of token ids
NAME = "name"  # a non-empty string: a name or a namespace
COUNT = "count"  # a non-negative int (an amount: the shrinker lowers it)
FLAG = "flag"  # true / false

# results that are true / false (every other result is an int)
FLAG_RESULTS = frozenset({"success", "deferred", "aborted", "borrowed", "issued", "done", "mamba_exist"})
# results that repeat what the tree shows (a node's depth, a hit the prefix already says):
# expectable and compared with SGLang, left out of a step's one-line result
DETAIL_RESULTS = frozenset({"last_node_depth", "best_match_depth", "full_kv_hit_length", "mamba_exist"})
# results read off a node: a side that cannot show its nodes (SGLang's Rust tree core) reports None
NODE_RESULTS = frozenset({"last_node_depth", "best_match_depth"})
# what a name field refers to, and the prefix the shrinker renumbers it with
NAMESPACES = {"matches": "m", "locks": "L", "requests": "r"}
HOST = "host tier"  # an op's need: the config has [config] hicache
STORAGE = "storage tier"  # an op's need: the config has hicache.storage
DEVICE, HOST_PARTS = "device", "host"  # per-component fields: every listed component, or those with a host part
BASE = COMPONENT_REGISTRY.declaring("BASE")[0]  # the component every cache lists first (Full)


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    kind: str
    required: bool = False
    defines: Optional[str] = None  # the namespace its value names anew (a match's ``as``)
    uses: Optional[str] = None  # the namespace its value must be live in (a lock's ``match``)
    ends: bool = False  # using the name ends it (an unlock, a finish)
    positional: bool = False  # live syntax: the first word after the op
    flag_word: Optional[str] = None  # live syntax: this bare word sets the flag …
    flag_value: bool = True  # … to this value
    needs: Optional[str] = None  # the component a truthy value needs
    page_multiple: bool = False  # a multiple of page_size (the shrinker lowers it by pages)
    placeholder: str = ""  # live syntax help (default from the kind)
    nonempty: bool = False  # a token list needs at least one token
    offered: bool = False  # live completion offers this keyword once the positional words are in


@dataclasses.dataclass(frozen=True)
class FuzzRule:
    """One kind of step the fuzzer draws: ``weight`` (0: not now) and ``make`` read and
    update the generator's model of live names. ``rank`` is the rule's place in the
    weighted draw, so a seed replays the same sequence whatever order ops load in."""

    rank: int
    weight: Callable[[Any], int]
    make: Callable[[Any], dict]
    # the model put right when our cache refused the step ``make`` drew (a decode with no
    # room adds no output tokens), so later draws stay valid: (generator, step, the
    # names of the requests running after it) -> None
    refused: Optional[Callable[[Any, dict, Collection[str]], None]] = None


@dataclasses.dataclass(frozen=True)
class OpSpec:
    name: str
    summary: str  # the help line
    run: Callable[[Any, dict], Optional[dict]]  # on our cache: (CacheDriver, fields) -> results
    fields: tuple[Field, ...] = ()
    results: tuple[str, ...] = ()  # result fields a step may expect
    reports_all_results: bool = False  # every result, whatever the components (else a component's only with it)
    per_component: Optional[str] = None  # DEVICE / HOST_PARTS: ``<component>=N`` fields …
    per_component_result: str = ""  # … and ``<component><suffix>`` results
    needs: tuple[str, ...] = ()  # components (or HOST) the op needs at all
    run_sglang: Optional[Callable[[Any, dict], Optional[dict]]] = None  # on SGLang's: (SGLangSide, fields)
    fuzz: tuple[FuzzRule, ...] = ()
    records: tuple[str, ...] = ()  # SGLang cache methods the recorder writes as this op …
    record: Optional[Callable[[Any, Any], Any]] = None  # … (TraceMapper, RecordedCall) -> step or comment
    record_before: Optional[Callable[[tuple, dict], Any]] = None  # read before the call (RecordedCall.before)
    wraps: tuple[str, ...] = ()  # SGLang methods that wrap this op's recorded call (timed as it, not recorded)
    records_nested: bool = False  # made inside another recorded call, it is still its own step (after it)
    refusal_changes: str = ""  # why a refused step of it may still change the state (as SGLang's does); else it may not
    defines_when_refused: bool = False  # a refused step of it may leave the name it defines live (later steps use it)
    read_only: bool = False  # never changes the pools (the recorder adds no sizes to it)
    describe: Optional[Callable[[dict], str]] = None  # ``why``'s words for a step of it
    frees: Optional[Callable[[dict], Optional[dict]]] = None  # a step of it that frees its pools outright for a
    # scenario's config (the shrinker's pressure steps), or None where the config has nothing for it
    aliases: tuple[str, ...] = ()  # older names a step may still use: the same op, the same fields

    def __post_init__(self) -> None:
        # fields by name, looked up for every field of every step a file holds
        object.__setattr__(self, "_by_name", {f.name: f for f in self.fields})

    def field(self, name: str) -> Optional[Field]:
        return self._by_name.get(name)

    @property
    def token_field(self) -> Optional[Field]:
        return next((f for f in self.fields if f.kind == TOKENS), None)

    @property
    def slot(self) -> Optional[Field]:
        return next((f for f in self.fields if f.positional), None)

    def component_fields(self, components, host_parts=()) -> tuple[str, ...]:
        """The ``<component>=N`` fields it takes with these components."""
        if self.per_component == DEVICE:
            return tuple(components)
        if self.per_component == HOST_PARTS:
            return tuple(host_parts)
        return ()

    def results_for(self, components, host_parts=()) -> tuple[str, ...]:
        if not self.per_component:
            return self.results
        made = tuple(f"{c}{self.per_component_result}" for c in self.component_fields(components, host_parts))
        return self.results + tuple(r for r in made if r not in self.results)

    def usage(self) -> str:
        """The live command's syntax, from the fields."""
        words = [self.name]
        if self.slot is not None:
            words.append(self.slot.placeholder or self.slot.name.upper())
        tokens = self.token_field
        if tokens is not None:
            words.append("TOKENS…")
        for f in self.fields:
            if f.positional or f.kind == TOKENS:
                continue
            if f.flag_word:
                words.append(f"[{f.flag_word}]")
            elif f.name == "as":
                words.append("as NAME" if f.required else "[as NAME]")
            else:
                value = f.placeholder or ("NAME" if f.kind == NAME else "N" if f.kind == COUNT else "true|false")
                words.append(f"{f.name}={value}" if f.required else f"[{f.name}={value}]")
        if self.per_component:
            words.append("[COMPONENT=N]")
        return " ".join(words)

    def step(self, **fields: Any) -> dict:
        """A raw step of this op (``as_`` for ``as``), for generators and tests."""
        return {"op": self.name, **{k.rstrip("_"): v for k, v in fields.items()}}

    def words(self, fields: dict, written: Optional[str] = None) -> str:
        """``lock m1 as L1``, ``evict swa=4``: the op (as ``written``: an alias stays
        an alias) and the names it uses."""
        if self.describe is not None:
            return self.describe(fields)
        name, slot = written or self.name, self.slot
        return f"{name} {fields[slot.name]}" if slot is not None and slot.name in fields else name


# ---- the registry ---------------------------------------------------------------------------------

_REGISTRY: dict[str, OpSpec] = {}
_ALIASES: dict[str, str] = {}  # an older op name -> the op's name now


def recorded_by(module: str, name: str) -> Callable[[Any, Any], Any]:
    """An op's ``record``: function ``name`` of ``workbench.record.<module>``, imported at
    the call (the recorder imports the ops, so the ops cannot import it first)."""
    def record(mapper, call):
        import importlib

        return getattr(importlib.import_module(f"workbench.record.{module}"), name)(mapper, call)

    return record


def declare(spec: OpSpec) -> OpSpec:
    """Add an op; its name and its aliases must be new."""
    for name in (spec.name, *spec.aliases):
        if name in _REGISTRY or name in _ALIASES:
            raise ValueError(f"op {name!r} is already declared")
    _REGISTRY[spec.name] = spec
    _ALIASES.update(dict.fromkeys(spec.aliases, spec.name))
    return spec


def withdraw(name: str) -> None:
    """Remove an op (a test's own op, once the test is done)."""
    spec = _REGISTRY.pop(name, None)
    for alias in spec.aliases if spec is not None else ():
        _ALIASES.pop(alias, None)


def get(name: Any) -> Optional[OpSpec]:
    """The op named ``name``, or by one of its aliases."""
    if not isinstance(name, str):
        return None
    return _REGISTRY.get(name) or _REGISTRY.get(_ALIASES.get(name, ""))


def canonical(name: str) -> str:
    """The op's name now for ``name`` (an alias or the name itself)."""
    return _ALIASES.get(name, name)


def all_ops() -> tuple[OpSpec, ...]:
    return tuple(_REGISTRY.values())


class OpTable(Mapping):
    """A read-only view of the registry, op name -> spec, in declaration order (a
    test's declared op shows up as soon as it is declared)."""

    def __getitem__(self, name: str) -> OpSpec:  # an alias finds its op; iteration lists names only
        spec = get(name)
        if spec is None:
            raise KeyError(name)
        return spec

    def __iter__(self) -> Iterator[str]:
        return iter(list(_REGISTRY))

    def __len__(self) -> int:
        return len(_REGISTRY)


OPS = OpTable()


def timed_calls(wrappers: bool = False) -> dict[str, str]:
    """SGLang cache method -> the op it is timed under: the calls each op records (and,
    with ``wrappers``, SGLang's wrappers around them)."""
    return {call: spec.name for spec in all_ops() for call in spec.records + (spec.wraps if wrappers else ())}


def name_fields() -> frozenset[str]:
    """Every field whose value is a name or text, whatever the op."""
    return frozenset(f.name for spec in all_ops() for f in spec.fields if f.kind == NAME)


def flag_words() -> frozenset[str]:
    return frozenset(f.flag_word for spec in all_ops() for f in spec.fields if f.flag_word)


def owner(field: str) -> Optional[str]:
    """The non-Full component a result or state field belongs to (``swa_evicted`` -> swa):
    a step may expect it only when that component is listed."""
    head = field.split("_")[0]
    return head if head in COMPONENT_REGISTRY and not is_base(head) else None


def reference_table() -> str:
    """The op reference (docs/reference/ops.md): one row an op, from the declarations."""
    rows = ["| op | live syntax | results | needs |", "|---|---|---|---|"]
    for spec in all_ops():
        results = ", ".join(spec.results + ((f"COMPONENT{spec.per_component_result}",) if spec.per_component else ()))
        needs = ", ".join(spec.needs) or "—"
        also = f" (also `{'`, `'.join(spec.aliases)}`, its older name)" if spec.aliases else ""
        rows.append(f"| `{spec.name}` — {spec.summary}{also} | `{spec.usage()}` | {results or '—'} | {needs} |")
    return "\n".join(rows)


def host_parts(components=None) -> tuple[str, ...]:
    """The listed components (None: every registered one) that keep copies on the host
    tier: Full and each component with a host part."""
    from cache.tiers.hicache_config import host_components  # names only: no torch

    return tuple(host_components(components))


# ---- components: what the workbench asks of each, from the facts its folder declares ----------
def fact(name: Optional[str], constant: str, default=None):
    """What the component's folder declares as ``constant``; ``default`` for a component
    that declares none, or a name no component has."""
    if name not in COMPONENT_REGISTRY:
        return default
    return COMPONENT_REGISTRY.declared(name, constant, default)


def is_base(name: Optional[str]) -> bool:
    """It is the component every cache has, first (Full): the others hang their data on its nodes."""
    return name == BASE


def has_window(name: Optional[str]) -> bool:
    """It keeps only a trailing window (SWA): its pool is sized by sliding_window."""
    return bool(fact(name, "HAS_WINDOW"))


def holds_states(name: Optional[str]) -> bool:
    """It holds one state slot per node (Mamba): its amounts count states, not tokens."""
    return bool(fact(name, "HOLDS_STATES"))


def in_sglang(name: Optional[str]) -> bool:
    """SGLang 0.5.23's unified cache has it, so the bridge can compare it."""
    return bool(fact(name, "IN_SGLANG"))


def windowed(components) -> Optional[str]:
    """The listed component that keeps a trailing window, or None."""
    return next((c for c in components if has_window(c)), None)


def stateful(components) -> Optional[str]:
    """The listed component that holds states, or None."""
    return next((c for c in components if holds_states(c)), None)


def sglang_components() -> tuple[str, ...]:
    """The components SGLang 0.5.23's unified cache has, in registry order: the bridge
    compares only these."""
    return COMPONENT_REGISTRY.declaring("IN_SGLANG")


def sglang_component_sets() -> list[tuple[str, ...]]:
    """The caches worth comparing with SGLang's: the base component alone, with each
    other component SGLang has, and with all of them."""
    base, *others = sglang_components()
    sets = [(base,), *((base, other) for other in others)]
    return sets + [(base, *others)] if len(others) > 1 else sets
