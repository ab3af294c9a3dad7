"""Finding the steps of a timeline where a condition holds: what the charts mark and
the cursor runs to. A condition is anything that says whether it holds at a step
(the breakpoint grammar's ``Condition`` is one); a stored run answers conditions that
hold only at failing steps from its index of those steps, without reading the rest."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Protocol, TypeVar

from .timeline import Timeline


class StepCondition(Protocol):
    failures_only: bool  # it can hold only at a failing step

    def holds(self, timeline: Timeline, index: int) -> bool:
        """Does it hold at step ``index`` (1-based)? Reads that step only."""


C = TypeVar("C", bound=StepCondition)


def any_holds(timeline: Timeline, conditions: Sequence[C], index: int) -> Optional[C]:
    """The first of ``conditions`` that holds at ``index``, or None."""
    return next((c for c in conditions if c.holds(timeline, index)), None)


def search(timeline: Timeline, conditions: Sequence[C], start: int, forward: bool = True,
           limit: Optional[int] = None) -> Optional[tuple[int, C]]:
    """The nearest step after (or before) ``start`` where a condition holds, and which;
    None when none does up to the end (or the start) of what is loaded."""
    if not conditions:
        return None
    end = len(timeline) if limit is None else min(limit, len(timeline))
    indices = range(start + 1, end + 1) if forward else range(min(start, end + 1) - 1, 0, -1)
    failing = getattr(timeline.store, "failing_indexes", None)
    if failing is not None and all(c.failures_only for c in conditions):
        # a stored run indexes its failing steps: only they can hold these (the defaults)
        listed = [i for i in failing() if i in indices]
        indices = listed if forward else listed[::-1]
    for index in indices:
        hit = any_holds(timeline, conditions, index)
        if hit is not None:
            return index, hit
    return None
