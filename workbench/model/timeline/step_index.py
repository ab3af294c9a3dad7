"""What a stored run indexes of each step beyond its failures and its nodes, so a
breakpoint on it finds its steps with one read of an index instead of one read per
step's record: the event kinds the step had (``event=split``, ``event=cascade
component=swa``) and the names it carries (``op=insert``, ``req=r5``).

A step is indexed under each kind its events answer to, once alone and once with the
event's component; a code packs the two (``kind * 16 + component``, component 0 for
"any"). The kinds' order is written into the store, so a reader maps names to codes
by the file, not by this version's enum. Its names are its op (under the op's name
now, an alias's too) and its request."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Optional

from cache import EventKind
from cache.observe.events import Cause, Event

from ..ops import canonical

KINDS: tuple[str, ...] = tuple(k.value for k in EventKind)
COMPONENT_SLOTS = 16  # components a code has room for (the first is "any")


def answers_to(event: Event) -> tuple[str, ...]:
    """The kinds ``event=K`` finds this event by: its own, and ``cascade`` for an
    evict (or tombstone) that a cascade caused."""
    if event.cause is Cause.CASCADE and event.kind is not EventKind.CASCADE:
        return event.kind.value, EventKind.CASCADE.value
    return (event.kind.value,)


class EventCoder:
    """A step's events -> the codes it is indexed under (memoised per kind, cause and
    component: a run has a few dozen such triples and millions of events)."""

    def __init__(self, kinds: Sequence[str], components: Sequence[str]) -> None:
        if len(components) >= COMPONENT_SLOTS:
            raise ValueError(f"an event index has room for {COMPONENT_SLOTS - 1} components")
        self._kind = {name: i for i, name in enumerate(kinds)}
        self._component = {name: i + 1 for i, name in enumerate(components)}
        self._memo: dict[tuple, tuple[int, ...]] = {}

    def code(self, kind: str, component: Optional[str] = None) -> Optional[int]:
        """The code of ``kind`` (on ``component``); None for a kind or component the run cannot have."""
        k = self._kind.get(kind)
        c = 0 if component is None else self._component.get(component)
        return None if k is None or c is None else k * COMPONENT_SLOTS + c

    def codes(self, events: Iterable[Event]) -> set[int]:
        out: set[int] = set()
        memo = self._memo
        for e in events:
            triple = (e.kind, e.cause, e.component)
            found = memo.get(triple)
            if found is None:
                found = memo[triple] = self._codes_of(e)
            out.update(found)
        return out

    def _codes_of(self, event: Event) -> tuple[int, ...]:
        out = []
        for kind in answers_to(event):
            alone = self.code(kind)
            if alone is None:
                continue
            out.append(alone)
            on = self.code(kind, event.component) if event.component is not None else None
            if on is not None and on != alone:
                out.append(on)
        return tuple(out)


def step_names(op: str, fields: dict) -> Iterator[tuple[str, str]]:
    """(field, value) for each indexed name of a step: its op, its request."""
    yield "op", canonical(op)
    req = fields.get("req")
    if isinstance(req, str):
        yield "req", req
