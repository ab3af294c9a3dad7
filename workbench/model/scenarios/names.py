"""The live names a scenario's steps define and use, and the step list an appender grows.

Both serve steps added one at a time (a fuzzer's next op, a live op, a followed trace):
a step is checked against the names so far and may be refused, and the scenario with it
is handed to the runner. Copying the names or the steps for every step made n appended
steps cost O(n²) (at 2,000 steps, 8 + 7 µs a step); here a step costs O(1) either way.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Optional

from .. import ops
from .errors import ScenarioError, shown

_ENDED = {"locks": "lock {} was already unlocked"}  # a second unlock is named as such
_UNKNOWN = {"matches": "unknown match name", "locks": "unknown lock name", "requests": "unknown or finished request"}
_TAKEN = {
    "matches": "match name {} is already taken (named {}); give each match its own name",
    "locks": "lock name {} is still held (locked {}); unlock it first or pick another name",
    "requests": "request {} is already running (started {}); finish it first",
}


class Names:
    """Names defined so far, per namespace (``matches``, ``locks``, ``requests``: name ->
    the line that defined it), to catch bad references and re-used live names at load
    time. Ended names (an unlocked lock) are remembered apart. Between ``begin()`` and
    ``rollback()`` every change is journaled, so a refused step is undone in what it
    changed rather than by copying every name first."""

    def __init__(self, components: list[str], host: bool = False, session_radix: bool = False) -> None:
        self.components = components
        self.host = host  # the config has a host tier
        self.session_radix = session_radix  # [config] session_radix_cache: session refs are kept
        self.live: dict[str, dict[str, str]] = {space: {} for space in ops.NAMESPACES}
        self.ended: dict[str, set[str]] = {space: set() for space in ops.NAMESPACES}
        self._journal: Optional[list[tuple[str, str, Optional[str], bool]]] = None

    @property
    def matches(self) -> dict[str, str]:
        return self.live["matches"]

    def begin(self) -> None:
        """Start journaling: ``rollback()`` undoes every change from here."""
        self._journal = []

    def rollback(self) -> None:
        for space, value, was_live, was_ended in reversed(self._journal or ()):
            live, ended = self.live[space], self.ended[space]
            live.pop(value, None)
            if was_live is not None:
                live[value] = was_live
            (ended.add if was_ended else ended.discard)(value)
        self._journal = None

    def commit(self) -> None:
        self._journal = None

    def _note(self, space: str, value: str) -> None:
        if self._journal is not None:
            self._journal.append((space, value, self.live[space].get(value), value in self.ended[space]))

    def track(self, spec, fields: dict, expects_error: bool, name: str, line_of) -> None:
        """Static name checks; a step expecting an error may reference a stale name on
        purpose (to show the cache's own error), so those skip the checks. A name is
        defined once while it is live: re-using a held lock's name would orphan its lock.
        A match name may be defined again only by a step that is not expected to fail,
        and so may the names of an op whose refusal can leave what it named live (a
        streaming turn whose post-prefill checkpoint asserts runs on)."""
        here = f"at line {line_of()}" if line_of() else "by a live op"  # a live op has no line
        for field in spec.fields:
            value, space = fields.get(field.name), field.uses or field.defines
            if value is None or space is None:
                continue
            if expects_error and field.defines != "matches" and not (field.defines and spec.defines_when_refused):
                continue
            live = self.live[space]
            if field.uses:
                if space in _ENDED and field.ends and value in self.ended[space] and value not in live:
                    raise ScenarioError(_ENDED[space].format(shown(value)), name, line_of(field.name), field.name)
                if value not in live:
                    raise ScenarioError(f"{_UNKNOWN[space]} {shown(value)}", name, line_of(field.name), field.name)
                if field.ends:
                    self._note(space, value)
                    del live[value]
                    self.ended[space].add(value)
            else:
                first = live.get(value)  # a second definition names both lines
                if first is not None:
                    raise ScenarioError(_TAKEN[space].format(shown(value), first), name, line_of(field.name), field.name)
                self._note(space, value)
                live[value] = here
                self.ended[space].discard(value)


class GrowingSteps(Sequence):
    """The first ``n`` steps of a list that only ever grows at its end: what a scenario
    holds as its steps while an appender adds to it. Each appended step gives a new view
    of the same list, so the scenario after every step is O(1) to make, and a view
    handed out earlier still shows exactly the steps it had. Reads as a tuple would."""

    __slots__ = ("_items", "_n")

    def __init__(self, items: list, n: int) -> None:
        self._items, self._n = items, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self._items[: self._n][i])
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("step index out of range")
        return self._items[i]

    def __iter__(self):
        return itertools.islice(self._items, self._n)

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(other) == self._n and all(a == b for a, b in zip(self, other))

    def __add__(self, other) -> tuple:
        return tuple(self) + tuple(other)

    def __repr__(self) -> str:
        return f"GrowingSteps({self._n} steps)"
