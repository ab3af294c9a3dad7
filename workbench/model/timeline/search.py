"""Finding the steps of a timeline where a condition holds: what the charts mark and
the cursor runs to. A condition is anything that says whether it holds at a step
(the breakpoint grammar's ``Condition`` is one). Some are answered without reading
step after step: a condition over counters alone (``swa_available<4``) from the run's
numbers per step (``RunSeries``), every step at once; on a stored run, one that holds
only at failing steps from its index of those, and one on an event kind, an op or a
request (``event=split``, ``op=insert``, ``req=r3``) from its indexes of kinds and names."""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Optional, Protocol, TypeVar

import numpy as np

from .timeline import Timeline


class StepCondition(Protocol):
    failures_only: bool  # it can hold only at a failing step

    def holds(self, timeline: Timeline, index: int) -> bool:
        """Does it hold at step ``index`` (1-based)? Reads that step only."""

    def where(self, series) -> Optional[np.ndarray]:
        """Where it holds at every step (a bool per step) from ``series``, or None."""

    def indexed_steps(self, store) -> Optional[tuple[Callable[[], Sequence[int]], bool]]:
        """A read of the steps a stored run's indexes say it can hold at, and whether
        it surely holds there; None when no index answers it."""


C = TypeVar("C", bound=StepCondition)


def any_holds(timeline: Timeline, conditions: Sequence[C], index: int) -> Optional[C]:
    """The first of ``conditions`` that holds at ``index``, or None."""
    return next((c for c in conditions if c.holds(timeline, index)), None)


def answered(timeline: Timeline, conditions: Sequence[C], series=None,
             end: Optional[int] = None) -> Optional[list[tuple[Sequence[int], bool]]]:
    """Per condition, the steps it can hold at (sorted) and whether it surely holds at
    each, without reading step after step: off ``series`` (read to ``end``) or a stored
    run's indexes; None when one of them needs the steps read (found out before any
    index is read: a scan asks again for every chunk)."""
    end = len(timeline) if end is None else end
    covered = series is not None and series.steps >= end
    indexed = [None if covered and getattr(c, "counters_only", False)
               else getattr(c, "indexed_steps", lambda _: None)(timeline.store) for c in conditions]
    if any(i is None and not (covered and getattr(c, "counters_only", False)) for c, i in zip(conditions, indexed)):
        return None
    out = []
    for c, index in zip(conditions, indexed):
        if index is None:
            where = c.where(series)
            if where is None:  # a field the series do not carry
                return None
            out.append((np.flatnonzero(where).tolist(), True))
        else:
            read, sure = index
            out.append((read(), sure))
    return out


def search(timeline: Timeline, conditions: Sequence[C], start: int, forward: bool = True,
           limit: Optional[int] = None, series=None, floor: int = 1) -> Optional[tuple[int, C]]:
    """The nearest step after (or before) ``start`` where a condition holds, and which;
    None when none does up to the end, ``limit`` (or back to ``floor``) of what is
    loaded. ``series``: the run's ``RunSeries``, read to the timeline's end, which
    answers counter conditions."""
    if not conditions:
        return None
    end = len(timeline) if limit is None else min(limit, len(timeline))
    lists = answered(timeline, conditions, series, end)
    if lists is not None:
        return _nearest(timeline, conditions, lists, start, end, forward, floor)
    indices = range(start + 1, end + 1) if forward else range(min(start, end + 1) - 1, max(floor, 1) - 1, -1)
    for index in indices:
        hit = any_holds(timeline, conditions, index)
        if hit is not None:
            return index, hit
    return None


def _nearest(timeline: Timeline, conditions: Sequence[C], lists: list[tuple[Sequence[int], bool]], start: int,
             end: int, forward: bool, floor: int) -> Optional[tuple[int, C]]:
    """``search`` over the answered steps: per condition its first sure step past
    ``start`` (a step it may hold at is read to make sure), then the nearest of those."""
    best: Optional[tuple[int, C]] = None
    for c, (steps, sure) in zip(conditions, lists):
        if forward:
            at, stop = bisect.bisect_right(steps, start), bisect.bisect_right(steps, end)
            candidates = (steps[i] for i in range(at, stop))
        else:
            low = max(floor, 1)
            at, stop = bisect.bisect_left(steps, min(start, end + 1)) - 1, bisect.bisect_left(steps, low) - 1
            candidates = (steps[i] for i in range(at, stop, -1))
        for index in candidates:
            if best is not None and (index >= best[0] if forward else index <= best[0]):
                break
            if sure or c.holds(timeline, index):
                best = (index, c)
                break
    if best is None:
        return None
    index = best[0]  # the first condition listed that holds there names the hit, as a scan would
    return index, next(c for c, (steps, sure) in zip(conditions, lists)
                       if _listed(steps, index) and (sure or c.holds(timeline, index)))


def _listed(steps: Sequence[int], index: int) -> bool:
    at = bisect.bisect_left(steps, index)
    return at < len(steps) and steps[at] == index


def all_hits(timeline: Timeline, conditions: Sequence[C], series=None) -> Optional[list[int]]:
    """Every step where one of ``conditions`` holds, when ``answered`` answers them all
    (steps it may hold at are read to make sure); None otherwise."""
    lists = answered(timeline, conditions, series)
    if lists is None:
        return None
    sure = set().union(*(steps for steps, s in lists if s))
    maybe = sorted(set().union(*(steps for steps, s in lists if not s)) - sure)
    found = [i for i in maybe if any_holds(timeline, [c for c, (_, s) in zip(conditions, lists) if not s], i)]
    return sorted(sure.union(found))


def quick(timeline: Timeline, conditions: Sequence) -> bool:
    """Does ``search`` answer these without reading step after step (counters, read off
    the series; failures and event kinds, from a stored run's indexes)? Else a scan may take long."""
    def one(c) -> bool:
        if getattr(c, "counters_only", False):
            return True
        return getattr(c, "indexed_steps", lambda _: None)(timeline.store) is not None

    return all(one(c) for c in conditions)


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
