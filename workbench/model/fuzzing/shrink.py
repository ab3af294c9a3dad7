"""Shrinking a failing op sequence to a minimal one that fails the same way.

Generic over steps (scenario step dicts) and a ``fails(steps) -> bool`` oracle, so it
is tested on its own. First the caller's pressure steps (evict every pool) go just
before the failing step, so the steps that only filled the pools can be dropped. Then
passes, repeated until none makes progress (or time runs out):
drop chunks of steps (delta debugging: halves, quarters, … single steps), shorten
token lists (halve, then drop single tokens), lower amounts (eviction sizes, window
floors) towards their smallest, and finally renumber tokens and names in order of
first use so the result reads ``1 2 3`` and ``m1 L1 r1``. Every candidate is one the
oracle accepted, so the result still fails the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Optional

from .. import ops
from ..scenarios.fields import COMMON_FIELDS

Steps = list[dict[str, Any]]


def pressure_steps(config: dict[str, Any]) -> Steps:
    """Steps that free every device pool outright (and Full's host pool, with a host
    tier), as the ops that can declare them (``OpSpec.frees``): what a long run's filler
    steps did, in a step or two the shrinker can try instead."""
    steps = (spec.frees(config) for spec in ops.all_ops() if spec.frees is not None)
    return [step for step in steps if step is not None]


def _fields_of(step: dict, kind: str) -> list[str]:
    """The step's fields of one kind, by its op's declaration (a ``<component>=N`` field
    is an amount)."""
    spec = ops.get(step.get("op"))
    if spec is None:
        return []
    declared = [f.name for f in spec.fields if f.kind == kind and f.name in step]
    if kind == ops.COUNT and spec.per_component:
        declared += [k for k in step if k not in COMMON_FIELDS and spec.field(k) is None]
    return declared


def _page_multiple(step: dict, field: str) -> bool:
    spec = ops.get(step.get("op"))
    declared = spec.field(field) if spec is not None else None
    return declared is not None and declared.page_multiple


class Shrinker:
    """``shrink(steps)``: the smallest failing sequence it finds. ``runs`` counts oracle calls."""

    def __init__(self, fails: Callable[[Steps], bool], budget_s: Optional[float] = None, page_size: int = 1,
                 on_progress: Optional[Callable[[int, int], None]] = None, pressure: Steps = ()) -> None:
        self.fails = fails
        self.pressure = list(pressure)  # steps that empty the pools outright (``pressure_steps``)
        self.deadline = None if budget_s is None else time.monotonic() + budget_s
        self.page_size = page_size
        self.runs = 0
        self.on_progress = on_progress  # (the best's length, candidates run), after each candidate
        self.best_len = 0
        self.interrupted = False  # Ctrl-C stopped it: the result is the best found so far

    def _try(self, candidate: Steps) -> bool:
        self.runs += 1
        ok = self.fails(candidate)
        if ok:  # every pass takes a candidate that still fails as its new best
            self.best, self.best_len = candidate, len(candidate)
        if self.on_progress is not None:
            self.on_progress(self.best_len, self.runs)
        return ok

    def attempt(self, candidate: Steps) -> bool:
        """Run one candidate; one that still fails becomes the best."""
        return self._try(candidate)

    def out_of_time(self) -> bool:
        return self._out_of_time()

    def _out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def shrink(self, steps: Steps, first_cut: Optional[Callable[[Shrinker, Steps], object]] = None) -> Steps:
        """The smallest failing sequence found; on Ctrl-C the best so far (``interrupted``).
        ``first_cut(shrinker, steps)`` runs first: a caller's pass whose accepted
        candidates (``attempt``) become the best."""
        self.best = [dict(s) for s in steps]
        self.best_len = len(self.best)
        try:
            if first_cut is not None:
                first_cut(self, self.best)
            self._evict_outright()
            self._shrink()
        except KeyboardInterrupt:
            self.interrupted = True
        return self.best

    def _shrink(self) -> None:
        progress = True
        while progress and not self._out_of_time():
            progress = False
            for shrink_pass in (self._drop_chunks, self._drop_with_dependents, self._shorten_tokens,
                                self._lower_amounts):
                smaller = shrink_pass(self.best)
                if smaller is not None:
                    self.best, progress = smaller, True
        renamed = renumber(self.best)
        if renamed != self.best and self._try(renamed):
            self.best = renamed

    def _evict_outright(self) -> None:
        """Many steps of a long repro only fill the pools so that something gets
        evicted: put the pressure steps (evict everything evictable) just before the
        failing step; when it still fails so, the filler can go in the passes that
        follow (and the pressure steps too, where they turn out not to matter)."""
        best = self.best
        if len(best) > len(self.pressure) + 2 and not self._out_of_time():
            self._try(best[:-1] + [dict(s) for s in self.pressure] + best[-1:])

    # ---- passes: each returns a smaller failing sequence, or None ------------------------------
    def _drop_chunks(self, steps: Steps) -> Optional[Steps]:
        best, chunk = steps, max(1, len(steps) // 2)
        improved = False
        while chunk >= 1 and not self._out_of_time():
            i = len(best) - chunk
            while i >= 0 and not self._out_of_time():  # from the end: late steps rarely set the failure up
                group = dependents_of(best, range(i, i + chunk))  # with the steps that use its names
                candidate = [s for j, s in enumerate(best) if j not in group]
                if candidate and self._try(candidate):
                    best, improved = candidate, True
                i = min(i, len(best)) - chunk
            chunk //= 2
        return best if improved else None

    def _drop_with_dependents(self, steps: Steps) -> Optional[Steps]:
        """Drop a step that defines a name together with every step that uses it (a
        match and its locks and their unlocks; a request and its decodes): removing
        either alone leaves a step naming something that no longer exists."""
        best, improved = steps, False
        i = len(best) - 1
        while i >= 0 and not self._out_of_time():
            group = dependents(best, i)
            if len(group) > 1:
                candidate = [s for j, s in enumerate(best) if j not in group]
                if candidate and self._try(candidate):
                    best, improved = candidate, True
            i = min(i, len(best)) - 1
        return best if improved else None

    def _shorten_tokens(self, steps: Steps) -> Optional[Steps]:
        best, improved = steps, False
        for index in range(len(best)):
            for field in _fields_of(best[index], ops.TOKENS):
                for shorter in self._shorter_lists(best[index].get(field)):
                    if self._out_of_time():
                        return best if improved else None
                    candidate = _with(best, index, field, shorter)
                    if self._try(candidate):
                        best, improved = candidate, True
                        break
        return best if improved else None

    def _shorter_lists(self, tokens) -> Iterator[list[int]]:
        if not isinstance(tokens, list) or len(tokens) <= 1:
            return
        page = self.page_size
        for size in sorted({len(tokens) // 2 // page * page, len(tokens) - page, len(tokens) - 1}):
            if 0 < size < len(tokens):
                yield tokens[:size]
        for i in range(len(tokens)):
            yield tokens[:i] + tokens[i + 1:]

    def _lower_amounts(self, steps: Steps) -> Optional[Steps]:
        best, improved = steps, False
        for index in range(len(best)):
            for field in _fields_of(best[index], ops.COUNT):
                value = best[index].get(field)
                if type(value) is not int or value <= 0:
                    continue
                step = self.page_size if _page_multiple(best[index], field) else 1
                for lower in sorted({0, step, value // 2 // step * step, value - step}):
                    if 0 <= lower < value and not self._out_of_time():
                        candidate = _with(best, index, field, lower) if lower else _without(best, index, field)
                        if self._try(candidate):
                            best, improved = candidate, True
                            break
        return best if improved else None


def _with(steps: Steps, index: int, field: str, value) -> Steps:
    out = list(steps)
    out[index] = {**steps[index], field: value}
    return out


def _without(steps: Steps, index: int, field: str) -> Steps:
    """Drop an amount field (0 is its default)."""
    out = list(steps)
    out[index] = {k: v for k, v in steps[index].items() if k != field}
    return out


def dependents(steps: Steps, index: int) -> set[int]:
    """``index`` and the later steps that use a name it defines, transitively."""
    return dependents_of(steps, (index,))


def dependents_of(steps: Steps, indexes) -> set[int]:
    """``indexes`` and the later steps that use a name one of them defines,
    transitively (a name defined again by a step kept is that step's from there on)."""
    group = set(indexes)
    if not group:
        return group
    defined: set[tuple[str, str]] = set()
    for j in range(min(group), len(steps)):
        if j in group:
            defined |= names_defined(steps[j])
        elif defined:
            if names_used(steps[j]) & defined:
                group.add(j)
                defined |= names_defined(steps[j])
            else:
                defined -= names_defined(steps[j])
    return group


def with_definers(steps: Steps, keep) -> list[int]:
    """``keep`` and, transitively, the step that defines each name a kept step uses
    (its latest definition before it), in order: a slice that still loads."""
    definer: dict[tuple[str, str], int] = {}
    defined_by: list[dict[tuple[str, str], int]] = []
    for j, step in enumerate(steps):
        defined_by.append({name: definer[name] for name in names_used(step) if name in definer})
        for name in names_defined(step):
            definer[name] = j
    kept, todo = set(keep), list(keep)
    while todo:
        for j in defined_by[todo.pop()].values():
            if j not in kept:
                kept.add(j)
                todo.append(j)
    return sorted(kept)


def names_defined(step: dict) -> set[tuple[str, str]]:
    """(namespace, name) pairs the step defines: a match's ``as``, a lock's, a request."""
    spec = ops.get(step.get("op"))
    fields = spec.fields if spec is not None else ()
    return {(f.defines, step[f.name]) for f in fields if f.defines and f.name in step}


def names_used(step: dict) -> set[tuple[str, str]]:
    spec = ops.get(step.get("op"))
    fields = spec.fields if spec is not None else ()
    return {(f.uses, step[f.name]) for f in fields if f.uses and f.name in step}


def renumber(steps: Steps) -> Steps:
    """Tokens renumbered 1, 2, 3 … and names m1, L1, r1 … in order of first use (the
    same structure: equal tokens stay equal, different ones different)."""
    tokens: dict[int, int] = {}
    names: dict[tuple[str, str], str] = {}
    counters = dict.fromkeys(ops.NAMESPACES, 0)

    def name(space: str, old: str) -> str:
        key = (space, old)
        if key not in names:
            counters[space] += 1
            names[key] = f"{ops.NAMESPACES[space]}{counters[space]}"
        return names[key]

    out = []
    for step in steps:
        new = dict(step)
        spec = ops.get(step.get("op"))
        for field in spec.fields if spec is not None else ():
            value = step.get(field.name)
            if field.kind == ops.TOKENS and isinstance(value, list):
                new[field.name] = [tokens.setdefault(t, len(tokens) + 1) for t in value]
            elif (field.defines or field.uses) and isinstance(value, str):
                new[field.name] = name(field.defines or field.uses, value)
        if isinstance(step.get("expect"), dict):  # a lock_ref table's match names (its other keys are nodes)
            new["expect"] = {k: ({names.get(("matches", m), m): v for m, v in val.items()} if isinstance(val, dict)
                                 else val) for k, val in step["expect"].items()}
        out.append(new)
    return out
