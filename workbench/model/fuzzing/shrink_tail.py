"""A long input's first cut, read once and never held whole.

A stored run of a million steps fails at its last step far more often than its first
steps matter. Holding every step as a dict before shrinking costs gigabytes, so for a
long input the steps are read once, in order, keeping only the last ``TAIL`` of them and,
for every step, which earlier steps define the names it uses (two ``array('q')`` columns:
eight bytes a reference). The candidates are then the last 1, 4, 16, … steps with the
steps defining their names, transitively, read back by index; the first that still does
what the target says is what the shrinker starts from. When none does, the caller falls
back to the whole input.
"""

from __future__ import annotations

import itertools
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Optional

from .shrink import Steps, names_defined, names_used

LONG = 20_000  # inputs with more steps before the target than this are cut from the tail first
TAIL = 4_096  # the last steps held in memory while reading
MOST_KEPT = 8_192  # a candidate slice (tail and definers) larger than this is not tried

ORIGIN = "_from"  # a step's line in the input: carried through the shrinker, never run
AT_TARGET = "_target"  # the input's target step: its expectation of the target's field is kept


class NameIndex:
    """For each step read, the earlier steps that define the names it uses (each name's
    latest definition before it), packed: what ``with_definers`` knows, without the steps."""

    def __init__(self) -> None:
        self.offsets = array("q", [0])
        self.definers = array("q")
        self.latest: dict[tuple[str, str], int] = {}  # a name -> the step that last defined it

    def add(self, raw: dict[str, Any]) -> None:
        index = len(self.offsets) - 1
        for name in names_used(raw):
            found = self.latest.get(name)
            if found is not None:
                self.definers.append(found)
        self.offsets.append(len(self.definers))
        for name in names_defined(raw):
            self.latest[name] = index

    def closure(self, keep, most: int) -> Optional[list[int]]:
        """``keep`` and, transitively, their definers, in order; None past ``most`` steps."""
        kept, todo = set(keep), list(keep)
        while todo:
            j = todo.pop()
            for definer in self.definers[self.offsets[j]:self.offsets[j + 1]]:
                if definer not in kept:
                    kept.add(definer)
                    todo.append(definer)
                    if len(kept) > most:
                        return None
        return sorted(kept)


def tail_cut(steps: Sequence, upto: int, attempt: Callable[[Steps], bool],
             out_of_time: Callable[[], bool]) -> Optional[Steps]:
    """The first tail slice of ``steps[:upto]`` (each a scenario step with ``raw`` and
    ``line``) that ``attempt`` accepts, as step dicts marked with their line and the last
    as the target; None when no slice of at most ``MOST_KEPT`` steps does."""
    names = NameIndex()
    tail: deque = deque(maxlen=TAIL)
    for step in itertools.islice(iter(steps), upto):
        names.add(step.raw)
        tail.append(step)
    first_held = upto - len(tail)

    def step_dict(j: int) -> dict[str, Any]:
        step = tail[j - first_held] if j >= first_held else steps[j]
        return {**step.raw, ORIGIN: step.line}

    size = 1
    while size <= len(tail) and not out_of_time():
        kept = names.closure(range(upto - size, upto), MOST_KEPT)
        if kept is None:
            return None
        candidate = [step_dict(j) for j in kept]
        candidate[-1][AT_TARGET] = True
        if attempt(candidate):
            return candidate
        size *= 4
    return None
