"""Breakpoints: conditions over a step, as data, parsed and checked against one step;
``timeline.search`` finds the next (or previous) step where one holds — the TUI's
``c`` / ``C``, ``urc run --until`` and the charts' markers.

A condition is written as space-separated terms that must all hold (``event=cascade
component=swa``); a breakpoint list holds when any of its conditions does. Terms:

- ``violation`` or ``violation=NAME`` — an invariant or fingerprint check failed
  (``NAME`` matches the start of the check's name: ``lock``, ``match.fingerprint``);
  ``fingerprint`` is short for ``violation=match.fingerprint``
- ``failed`` — a failed expectation (or an op error nobody expected); ``error`` — the op
  raised
- ``event=KIND`` with optional ``component=``, ``node=``, ``cause=`` — one event of the
  step has them all (``cascade`` also finds data a cascade took from a deleted leaf)
- ``node=ID`` (with optional ``component=``) and no event term — the step changed that
  node: it was added, removed, or a component's value, tombstone or lock changed
- ``op=NAME``, ``req=NAME``, ``step>=N`` (any comparison) — what the step is
- ``session=ID`` — the step concerns that session: its op names it (``session_open``,
  ``session_release``, ``stream_turn``, ``req_prefill … session=ID``), it runs one of the
  session's requests (its ``req`` is in the session before or after the step), or one of
  its events is about it (a SESSION_REF or SESSION_LEAF event of the session's tag, a
  SLOT event of its streaming slot). Eviction events name no session: pair it with
  ``why --session`` to see what an eviction did to the session's data
- ``FIELD<N`` for any state field a step may expect (``swa_available<4``,
  ``full_evictable>=100``, ``requests>2``, ``nodes>=50``, ``mamba_tombstones>0``, with a
  host tier ``full_host_available<30``; any of ``= != < <= > >=``) — the field *crosses*
  the threshold at this step: it holds after the step and did not before, so ``c`` stops
  once per crossing, not on every step below. Pool counters are read from the step's
  totals; the counts over the tree (nodes, tombstones, leaves, host nodes) from its state

Conditions are parsed, never ``eval``-ed. Checking a step reads only that step's
record, events, delta and pool totals, so a search costs O(steps it passes), never
O(tree): 10,000 steps in well under a second (README).
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Optional

import numpy as np

from cache.observe.events import Cause, Event, EventKind

from ..ops import canonical
from ..scenarios.errors import shown
from ..scenarios.fields import HOST_NODE_FIELDS, host_state_field
from ..timeline.step_index import answers_to
from ..timeline.state_fields import globals_field, state_field
from ..timeline.timeline import StepRecord, Timeline
from ..ops.spec import BASE, sglang_components

DEFAULT_COMPONENTS = sglang_components()  # what a condition may name when no cache is given

COMPARISONS: dict[str, Callable[[int, int], bool]] = {
    "<=": operator.le, ">=": operator.ge, "!=": operator.ne, "=": operator.eq, "<": operator.lt, ">": operator.gt,
}
_TERM = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)\s*(<=|>=|!=|=|<|>)\s*(\S+)$")
POOL_COUNTERS = ("available", "evictable", "protected", "held", "total")
EVENT_KINDS = tuple(k.value for k in EventKind)
FLAGS = ("violation", "fingerprint", "failed", "error")


class ConditionError(ValueError):
    """A breakpoint condition that cannot be understood; the message says which term."""


@dataclasses.dataclass(frozen=True)
class Comparison:
    field: str
    op: str
    value: int

    def test(self, actual: int) -> bool:
        return COMPARISONS[self.op](actual, self.value)

    def __str__(self) -> str:
        return f"{self.field}{self.op}{self.value}"


@dataclasses.dataclass(frozen=True)
class Condition:
    """Every term must hold. Fields left ``None`` take no part."""

    text: str
    violation: Optional[str] = None  # "" = any violation, else a name prefix
    failed: bool = False
    error: bool = False
    event: Optional[str] = None  # an EventKind value
    cause: Optional[str] = None
    component: Optional[str] = None
    node: Optional[int] = None
    op: Optional[str] = None
    req: Optional[str] = None
    session: Optional[str] = None
    steps: tuple[Comparison, ...] = ()
    pools: tuple[Comparison, ...] = ()

    def __str__(self) -> str:
        return self.text

    def holds(self, timeline: Timeline, index: int) -> bool:
        """Does it hold at step ``index`` (1-based)? Reads that step only."""
        return holds(timeline, self, index)

    @property
    def failures_only(self) -> bool:
        """It can hold only at a failing step (a stored run indexes those)."""
        return self.failed or self.violation is not None

    @property
    def terms(self) -> frozenset[str]:
        """The kinds of term it has (``violation``, ``event``, ``req``, ``pools`` …)."""
        return frozenset(name for name, value in (
            ("violation", self.violation), ("failed", self.failed or None), ("error", self.error or None),
            ("event", self.event), ("cause", self.cause), ("component", self.component), ("node", self.node),
            ("op", self.op), ("req", self.req), ("session", self.session), ("steps", self.steps or None),
            ("pools", self.pools or None)) if value is not None)

    @property
    def counters_only(self) -> bool:
        """Its terms are state-field and step comparisons alone: the run's numbers per
        step (``RunSeries``) answer it for every step at once."""
        terms = self.terms
        return "pools" in terms and terms <= {"pools", "steps"}

    def indexed_steps(self, store) -> Optional[tuple[Callable[[], Sequence[int]], bool]]:
        """A read of the steps a stored run's indexes say it can hold at, and whether
        it holds at each of them (it does when the index covers every term; else each
        is read to make sure); None when no index answers it. The index of event
        kinds answers ``event`` (with its ``component``), the index of names ``req``
        and ``op``, the index of failing steps a condition only a failure can meet."""
        terms = self.terms
        with_event = getattr(store, "steps_with_event", None)
        if self.event is not None and with_event is not None:
            return (lambda: with_event(self.event, self.component)), terms <= {"event", "component"}
        named = getattr(store, "steps_named", None)
        for field in ("req", "op"):
            value = getattr(self, field)
            if value is not None and named is not None:
                value = canonical(value) if field == "op" else value
                return (lambda field=field, value=value: named(field, value)), terms == {field}
        failing = getattr(store, "failing_indexes", None)
        if self.failures_only and failing is not None:
            return failing, False
        return None

    def where(self, series) -> Optional[np.ndarray]:
        """Every step where it holds (a bool per step, index 0 the start), read off the
        run's series without a step's record; None when it needs them (``counters_only``
        false, or a field the series do not carry)."""
        if not self.counters_only or any(p.field not in series.info for p in self.pools):
            return None
        n = series.steps + 1
        now = np.ones(n, dtype=bool)
        for p in self.pools:
            now &= COMPARISONS[p.op](series.values(p.field), p.value)
        crossed = np.zeros(n, dtype=bool)
        crossed[1:] = now[1:] & ~now[:-1]  # holds after the step and did not before
        index = np.arange(n)
        for s in self.steps:
            crossed &= COMPARISONS[s.op](index, s.value)
        return crossed


def parse_condition(text: str, components: Sequence[str] = DEFAULT_COMPONENTS, host: bool = False) -> Condition:
    """``event=cascade component=swa`` -> Condition; a bad term raises ConditionError.
    ``host``: the cache has a host tier, so its state fields are known too."""
    words = text.split()
    if not words:
        raise ConditionError("an empty condition; try 'violation', 'event=cascade component=swa' or 'swa_available<4'")
    fields: dict = {"text": " ".join(words)}
    steps: list[Comparison] = []
    pools: list[Comparison] = []
    for word in words:
        if word in FLAGS:
            if word in ("violation", "fingerprint"):
                fields["violation"] = "" if word == "violation" else "match.fingerprint"
            else:
                fields[word] = True
            continue
        m = _TERM.match(word)
        if m is None:
            raise ConditionError(f"cannot read {word!r}: write NAME=VALUE, a comparison like swa_available<4, "
                                 f"or one of {', '.join(FLAGS)}")
        name, op, value = m.groups()
        if name in ("event", "cause", "component", "op", "req", "session", "violation", "node") and op != "=":
            raise ConditionError(f"{name} takes '=' (got {word!r})")
        if name == "event":
            if value not in EVENT_KINDS:
                raise ConditionError(f"unknown event kind {value!r}; known: {', '.join(EVENT_KINDS)}")
            fields["event"] = value
        elif name == "cause":
            causes = [c.value for c in Cause]
            if value not in causes:
                raise ConditionError(f"unknown cause {value!r}; known: {', '.join(causes)}")
            fields["cause"] = value
        elif name == "component":
            if value not in components:
                raise ConditionError(f"unknown component {value!r}; this cache has {', '.join(components)}")
            fields["component"] = value
        elif name in ("node", "step") or _state_field(name, components, host):
            number = _int(value, word)
            if name == "node":
                fields["node"] = number
            else:
                (steps if name == "step" else pools).append(Comparison(name, op, number))
        elif name in ("op", "req", "session", "violation"):
            fields[name] = value
        else:
            known = ", ".join(f"{c}_{k}" for c in components for k in POOL_COUNTERS[:2])
            host_hint = "" if host or not host_state_field(name) else " (a host-tier field: this scenario has no host tier)"
            raise ConditionError(f"unknown term {shown(name)}{host_hint}; terms: event, cause, component, node, op, req, "
                                 f"session, step, violation, failed, error, or a state field ({known}, …, nodes, requests)")
    return Condition(**fields, steps=tuple(steps), pools=tuple(pools))


def _state_field(name: str, components: Sequence[str], host: bool) -> bool:
    """Any state field a scenario step may expect for this cache (``swa_available``,
    ``nodes``, ``mamba_tombstones``, with a host tier ``full_host_available``)."""
    if name in ("requests", "nodes", "evictable_leaves") or host and name in HOST_NODE_FIELDS:
        return True
    if host and host_state_field(name):
        return name.partition("_host_")[0] in components
    component, _, counter = name.partition("_")
    return component in components and (counter in POOL_COUNTERS or component != BASE and counter == "tombstones")


def _int(value: str, word: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ConditionError(f"{word!r}: {value!r} is not a whole number") from None


def parse_conditions(texts: Iterable[str], components: Sequence[str] = DEFAULT_COMPONENTS,
                     host: bool = False) -> list[Condition]:
    return [parse_condition(t, components, host) for t in texts]


# ---- evaluation --------------------------------------------------------------------------------


def holds(timeline: Timeline, condition: Condition, index: int) -> bool:
    """Does ``condition`` hold at step ``index`` (1-based)? Reads that step only."""
    if not 1 <= index <= len(timeline):
        return False
    record = timeline.records[index - 1]
    c = condition
    if c.op is not None and canonical(record.step.op) != canonical(c.op):  # op=release finds req_finish too
        return False
    if c.req is not None and record.step.fields.get("req") != c.req:
        return False
    if c.session is not None and not concerns_session(timeline, index, c.session):
        return False
    if any(not s.test(index) for s in c.steps):
        return False
    if c.failed and not record.failures:
        return False
    if c.error and record.error is None:
        return False
    if c.violation is not None and not any(v.name.startswith(c.violation) for v in record.violations):
        return False
    if c.pools and not _crossed(timeline, c.pools, index):
        return False
    if c.event is not None or c.cause is not None:
        return any(_event_matches(c, e) for e in record.events)
    if c.node is not None:
        return _node_changed(timeline, c, index)
    if c.component is not None:
        return any(e.component == c.component for e in record.events)
    return True


def _event_matches(c: Condition, e: Event) -> bool:
    if c.event is not None and c.event not in answers_to(e):  # (a cascade's evict answers to cascade too)
        return False
    if c.cause is not None and e.cause.value != c.cause:
        return False
    if c.component is not None and e.component != c.component:
        return False
    return c.node is None or e.node == c.node


_SESSION_TAG_KINDS = (EventKind.SESSION_REF, EventKind.SESSION_LEAF)


def concerns_session(timeline: Timeline, index: int, sid: str) -> bool:
    """Step ``index`` names session ``sid``, runs one of its requests, or has an event
    about its tag or its slot (the ``session=`` term)."""
    record = timeline.records[index - 1]
    fields = record.step.fields
    if fields.get("session") == sid:
        return True
    for e in record.events:
        if e.kind in _SESSION_TAG_KINDS and e.detail.startswith(sid + " "):
            return True
        if e.kind is EventKind.SLOT and e.detail.startswith(f"session {sid}:"):
            return True
    rid = fields.get("req")
    if rid is None:
        return False
    store = timeline.store.globals
    return any(v.rid == rid and v.session == sid for g in (store[index - 1], store[index]) for v in g.requests)


def _node_changed(timeline: Timeline, c: Condition, index: int) -> bool:
    store = timeline.store
    if c.node not in store.deltas[index]:
        return False
    before, after = store.befores[index][c.node], store.deltas[index][c.node]
    if before is None or after is None:
        return before is not after  # added or removed
    if c.component is None:
        pairs = zip(before.components, after.components)
    else:
        i = store.shape.components.index(c.component)
        pairs = [(before.components[i], after.components[i])]
    return any((a.value_len, a.lock_ref, a.extras) != (b.value_len, b.lock_ref, b.extras) for a, b in pairs)


def _field_value(timeline: Timeline, index: int, field: str) -> int:
    """A pool counter from the step's totals (O(1)); a count over the tree (``nodes``,
    tombstones, leaves, host nodes) from the state after the step."""
    counted = globals_field(timeline.store.globals[index], field)
    return counted if counted is not None else state_field(timeline.state_after(index), field)


def _crossed(timeline: Timeline, pools: tuple[Comparison, ...], index: int) -> bool:
    now = all(p.test(_field_value(timeline, index, p.field)) for p in pools)
    return now and not all(p.test(_field_value(timeline, index - 1, p.field)) for p in pools)


def describe_hit(record: StepRecord, condition: Condition) -> str:
    """One line: which condition stopped at which step."""
    return f"step {record.index} ({record.step.op}, line {record.step.line}): {condition.text}"
