"""Finding the steps of a timeline where a condition holds: what the charts mark and
the cursor runs to. A condition is anything that says whether it holds at a step
(the breakpoint grammar's ``Condition`` is one); a stored run answers conditions that
hold only at failing steps from its index of those steps, without reading the rest, and
a condition over counters alone (``swa_available<4``) from the run's numbers per step
(``RunSeries``), every step at once."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Optional, Protocol, TypeVar

import numpy as np

from .timeline import Timeline


class StepCondition(Protocol):
    failures_only: bool  # it can hold only at a failing step

    def holds(self, timeline: Timeline, index: int) -> bool:
        """Does it hold at step ``index`` (1-based)? Reads that step only."""

    def where(self, series) -> Optional[np.ndarray]:
        """Where it holds at every step (a bool per step) from ``series``, or None."""


C = TypeVar("C", bound=StepCondition)


def any_holds(timeline: Timeline, conditions: Sequence[C], index: int) -> Optional[C]:
    """The first of ``conditions`` that holds at ``index``, or None."""
    return next((c for c in conditions if c.holds(timeline, index)), None)


def search(timeline: Timeline, conditions: Sequence[C], start: int, forward: bool = True,
           limit: Optional[int] = None, series=None, floor: int = 1) -> Optional[tuple[int, C]]:
    """The nearest step after (or before) ``start`` where a condition holds, and which;
    None when none does up to the end, ``limit`` (or back to ``floor``) of what is
    loaded. ``series``: the run's ``RunSeries``, read to the timeline's end, which
    answers counter conditions."""
    if not conditions:
        return None
    end = len(timeline) if limit is None else min(limit, len(timeline))
    if series is not None and series.steps >= end:
        wheres = [getattr(c, "where", lambda _: None)(series) for c in conditions]
        if all(w is not None for w in wheres):
            return _nearest(wheres, conditions, start, end, forward, floor)
    indices = range(start + 1, end + 1) if forward else range(min(start, end + 1) - 1, max(floor, 1) - 1, -1)
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


def _nearest(wheres: list[np.ndarray], conditions: Sequence[C], start: int, end: int,
             forward: bool, floor: int) -> Optional[tuple[int, C]]:
    """``search`` over per-step answers: the first marked step past ``start``."""
    marked = np.logical_or.reduce(wheres)
    if forward:
        found = np.flatnonzero(marked[start + 1:end + 1])
        index = None if not len(found) else start + 1 + int(found[0])
    else:
        low = max(floor, 1)
        found = np.flatnonzero(marked[low:max(low, min(start, end + 1))])
        index = None if not len(found) else low + int(found[-1])
    if index is None:
        return None
    return index, next(c for c, w in zip(conditions, wheres) if w[index])


def quick(timeline: Timeline, conditions: Sequence) -> bool:
    """Does ``search`` answer these without reading step after step (counters, read off
    the series; failures, from a stored run's index)? Else a scan may take long."""
    if all(getattr(c, "counters_only", False) for c in conditions):
        return True
    return getattr(timeline.store, "failing_indexes", None) is not None and all(c.failures_only for c in conditions)


def scan(timeline: Timeline, conditions: Sequence[C], start: int, forward: bool = True, lock=None,
         chunk: int = 512, limit: Optional[int] = None) -> Iterator[tuple[Optional[tuple[int, C]], int, int]]:
    """``search`` a chunk of steps at a time, so a long scan can report progress and be
    given up between chunks: each chunk is read under ``lock`` (a timeline still
    loading grows meanwhile), up to ``limit`` (default: what is loaded). Yields (the
    hit or None, steps passed, steps to pass) per chunk and stops after a hit."""
    at = start
    while True:
        with lock if lock is not None else contextlib.nullcontext():
            end = len(timeline) if limit is None else min(limit, len(timeline))
            if forward:
                if at >= end:
                    return
                upto = min(at + chunk, end)
                hit = search(timeline, conditions, at, True, limit=upto)
                at, passed, total = upto, upto - start, end - start
            else:
                if at <= 1:
                    return
                down = max(1, at - chunk)
                hit = search(timeline, conditions, at, False, floor=down)
                at, passed, total = down, start - down, start
        yield hit, passed, total
        if hit is not None:
            return
