"""What a step did to each running request: the two states' ``RequestView``s compared
field by field, plus what the step's events say it allocated or freed for that
request (the events carry the request id), for the TUI's request panel, the text
report, the SVG export and ``why``.

Pure model: plain data and sentences, no rendering. Reading a step's diff costs its
two globals records (kept per step) and its events, never a tree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Optional

from cache.observe.events import Event, EventKind
from cache.observe.views import RequestView

from ..scenarios.errors import printable
from .fmt import plural

ADDED, ENDED, CHANGED = "added", "ended", "changed"
EMPTY: Mapping = MappingProxyType({})


@dataclasses.dataclass(frozen=True)
class FieldChange:
    """One field of a request that changed: ``field`` is ``prefix``, ``committed``,
    ``inserted``, ``locked``, ``stop``, ``owned``, ``priority``, ``chunked``, ``row``, or
    ``<component>.<field>`` for a component's request state."""

    field: str
    before: object
    after: object
    text: str  # "prefix grew 0 → 64", "lock moved from #0 to #1"


@dataclasses.dataclass(frozen=True)
class RequestChange:
    rid: str
    status: str  # ADDED, ENDED or CHANGED
    before: Optional[RequestView]  # None: not running before the step
    after: Optional[RequestView]  # None: not running after it
    fields: tuple[FieldChange, ...]
    freed: Mapping[tuple[str, str], int] = dataclasses.field(default_factory=lambda: EMPTY)  # (component, cause) -> slots freed
    allocated: Mapping[str, int] = dataclasses.field(default_factory=lambda: EMPTY)  # component -> slots allocated

    def field(self, name: str) -> Optional[FieldChange]:
        return next((f for f in self.fields if f.field == name), None)

    @property
    def prefix_shrank(self) -> bool:
        change = self.field("prefix")
        return change is not None and change.after < change.before

    @property
    def lines(self) -> tuple[str, ...]:
        """What happened to it, one phrase each: status, fields, then pools."""
        out = []
        if self.status == ADDED:
            v = self.after
            out.append(f"admitted: prefix {v.cache_protected_len} of a {v.prompt_len:,}-token prompt"
                       + (f", lock on #{v.lock_node}" if v.lock_node is not None else ""))
        elif self.status == ENDED:
            v = self.before
            out.append(f"ended: it held {plural(v.own_len, 'own slot')} past a prefix of {v.cache_protected_len}"
                       + (f", lock on #{v.lock_node} released" if v.lock_node is not None else ""))
        out += [f.text for f in self.fields]
        out += [f"took {plural(n, 'slot')} of {component}" for component, n in self.allocated.items()]
        out += [f"freed {plural(n, 'slot')} of {component} [{cause}]" for (component, cause), n in self.freed.items()]
        return tuple(out)

    def text(self) -> str:
        return f"{printable(self.rid)}: " + "; ".join(self.lines)


@dataclasses.dataclass(frozen=True)
class RequestDiff:
    """Every request the step touched: running ones in admission order, then the ended."""

    changes: tuple[RequestChange, ...]

    def get(self, rid: str) -> Optional[RequestChange]:
        return next((c for c in self.changes if c.rid == rid), None)

    @property
    def is_empty(self) -> bool:
        return not self.changes

    def lines(self) -> list[str]:
        return [c.text() for c in self.changes]


def request_diff(before: Iterable[RequestView], after: Iterable[RequestView],
                 events: Iterable[Event] = ()) -> RequestDiff:
    """From the requests before a step to those after it; ``events`` (the step's)
    add what it allocated and freed per request."""
    old = {v.rid: v for v in before}
    new = {v.rid: v for v in after}
    freed: dict[str, dict[tuple[str, str], int]] = {}
    allocated: dict[str, dict[str, int]] = {}
    for e in events:
        if not e.request or e.component is None:
            continue
        if e.kind is EventKind.FREE:
            per = freed.setdefault(e.request, {})
            per[(e.component, e.cause.value)] = per.get((e.component, e.cause.value), 0) + e.tokens
        elif e.kind is EventKind.ALLOC:
            per = allocated.setdefault(e.request, {})
            per[e.component] = per.get(e.component, 0) + e.tokens
    changes = []
    for rid in [*new, *(r for r in old if r not in new)]:
        b, a = old.get(rid), new.get(rid)
        status = ADDED if b is None else ENDED if a is None else CHANGED
        fields = field_changes(b, a) if status == CHANGED else ()
        f, al = freed.get(rid, {}), allocated.get(rid, {})
        if status == CHANGED and not fields and not f and not al:
            continue
        changes.append(RequestChange(rid, status, b, a, fields, MappingProxyType(f) if f else EMPTY,
                                     MappingProxyType(al) if al else EMPTY))
    return RequestDiff(tuple(changes))


def step_request_diff(timeline, step: int) -> RequestDiff:
    """What step ``step`` did to the running requests (empty at the start)."""
    n = len(timeline.records)
    if not 1 <= step <= n:
        return RequestDiff(())
    globals_ = timeline.store.globals
    return request_diff(globals_[step - 1].requests, globals_[step].requests, timeline.records[step - 1].events)


def field_changes(b: RequestView, a: RequestView) -> tuple[FieldChange, ...]:
    """What differs between two views of one running request, as phrases."""
    if a == b:
        return ()
    out = []

    def grew(field: str, name: str, old: int, new: int) -> None:
        if old != new:
            verb = "grew" if new > old else "shrank"
            out.append(FieldChange(field, old, new, f"{name} {verb} {old} → {new} ({new - old:+})"))

    grew("prefix", "prefix", b.cache_protected_len, a.cache_protected_len)
    grew("committed", "committed", b.tokens, a.tokens)
    if b.tokens > a.tokens:  # the row lost its tail
        out.append(FieldChange("row", b.tokens, a.tokens, f"{plural(b.tokens - a.tokens, 'slot')} freed from its tail"))
    elif b.row_ends[0] != a.row_ends[0] and b.tokens == a.tokens:
        out.append(FieldChange("row", b.row_ends[0], a.row_ends[0],
                               f"row now starts {_slots(a.row_ends[0])} (was {_slots(b.row_ends[0])})"))
    if b.inserted_len != a.inserted_len:
        out.append(FieldChange("inserted", b.inserted_len, a.inserted_len,
                               f"inserted {b.inserted_len} → {a.inserted_len}"))
    lock = _lock_change(b, a)
    if lock:
        out.append(FieldChange("locked", (b.lock_node, b.lock_receipt), (a.lock_node, a.lock_receipt), lock))
    if b.finished_len != a.finished_len:
        text = (f"stop set after {plural(a.finished_len, 'output token')}" if b.finished_len is None
                else "stop cleared" if a.finished_len is None
                else f"stop moved {b.finished_len} → {a.finished_len} output tokens")
        out.append(FieldChange("stop", b.finished_len, a.finished_len, text))
    if b.owned_len != a.owned_len and a.owned_len is not None:
        out.append(FieldChange("owned", b.owned_len, a.owned_len, f"owned {_or_dash(b.owned_len)} → {a.owned_len}"))
    if b.priority != a.priority:
        out.append(FieldChange("priority", b.priority, a.priority, f"priority {b.priority} → {a.priority}"))
    if b.is_chunked != a.is_chunked:
        out.append(FieldChange("chunked", b.is_chunked, a.is_chunked,
                               "chunked prefill done" if b.is_chunked else "back in chunked prefill"))
    if b.components != a.components:
        old, new = dict(b.components), dict(a.components)
        for name in dict.fromkeys([*old, *new]):
            fb, fa = dict(old.get(name, ())), dict(new.get(name, ()))
            for key in dict.fromkeys([*fb, *fa]):
                if fb.get(key) != fa.get(key):
                    out.append(FieldChange(f"{name}.{key}", fb.get(key), fa.get(key),
                                           f"{name} {key} {_value(fb.get(key))} → {_value(fa.get(key))}"))
    return tuple(out)


def _lock_change(b: RequestView, a: RequestView) -> str:
    if (b.lock_node, b.lock_receipt) == (a.lock_node, a.lock_receipt):
        return ""
    if b.lock_node is None:
        return f"lock taken on #{a.lock_node}"
    if a.lock_node is None:
        return f"lock on #{b.lock_node} released"
    if b.lock_node == a.lock_node:
        return f"lock on #{a.lock_node} taken again (receipt {b.lock_receipt} → {a.lock_receipt})"
    return f"lock moved from #{b.lock_node} to #{a.lock_node}"


def _slots(ids: tuple[int, ...]) -> str:
    return "at slot " + ", ".join(map(str, ids)) if ids else "empty"


def _or_dash(value) -> str:
    return "–" if value is None else str(value)


def _value(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, tuple):
        return "(" + ", ".join(map(printable, value)) + ")" if value else "()"
    return printable(value)


# ---- one request as cells, for every viewer ------------------------------------------------------
def request_cells(v: RequestView) -> dict[str, str]:
    """A running request's columns as the panel, the report and the SVG show them:
    ``req``, ``prefix``, ``committed`` (with the owned length under a stop), ``inserted``,
    ``locked`` (node and receipt), ``row`` (its ends), ``priority``, ``state`` (chunked)
    and ``components`` (each component's request fields)."""
    committed = f"{v.tokens:,}"
    if v.finished_len is not None:
        committed += f" (owns {_or_dash(v.owned_len)}, stop {v.finished_len})"
    return {
        "req": printable(v.rid),
        "prefix": f"{v.cache_protected_len:,}",
        "committed": committed,
        "inserted": f"{v.inserted_len:,}",
        "locked": f"#{v.lock_node} receipt {v.lock_receipt}" if v.lock_node is not None else "–",
        "row": row_text(v),
        "priority": str(v.priority),
        "state": "chunked" if v.is_chunked else "",
        "components": "  ".join(f"{name} " + " ".join(f"{k}={_value(x)}" for k, x in fields)
                                for name, fields in v.components if fields),
    }


def row_text(v: RequestView) -> str:
    """``[0 1 2 … 70 71 72]``: the row's first and last slots (the whole row when short)."""
    head, tail = v.row_ends
    if not tail:
        return "[" + " ".join(map(str, head)) + "]"
    return "[" + " ".join(map(str, head)) + " … " + " ".join(map(str, tail)) + "]"
