"""A whole run as numbers per step: what ``urc plot`` draws and a timeline panel could.

Read from the timeline's records only — each step's totals (``store.globals``: pools,
running requests, metrics) and what the step changed (``store.deltas`` / ``befores``
for the counts over the tree) — never by re-running the trace, and never by building
a step's state: one pass over the steps, O(steps + changes). ``refresh()`` reads the
steps added since the last read, so a viewer of a growing timeline (the background
loader, ``--follow``) pays only for the new ones.

Every series has one value per step, index 0 being the empty start, so ``values[i]``
is the state after step ``i``. The series, named as a scenario expects the field
(``full_available``, ``nodes``) where there is such a field:

- per pool (``full``, ``swa``, ``mamba``, host pools ``full_host`` …): ``<pool>_total``,
  ``_available``, ``_evictable``, ``_protected``, ``_held`` and the derived
  ``<pool>_unaccounted = total - available - evictable - protected - held``: the slots
  nobody accounts for. It is 0 at every step of a healthy run on a device pool, so a
  leak shows as the step where it leaves 0 (``changes_at``). A host pool's view counts
  no holder besides the tree, so there a retracted request's host backup and a
  prefetch's staged slots show in it too (``cache/controller/snapshot.py``: ``pool_views``).
- ``hit_rate``: device-hit tokens over every token a match looked up (device hits +
  host hits + misses, ``cache/observe/metrics.py``), cumulative through the step — the figure a
  whole run converges to; ``hit_rate_recent``: the same over the last ``RECENT_STEPS``
  steps, so a change of behaviour late in a long run still shows; with a host tier,
  ``host_hit_rate`` (host-hit tokens over the same, cumulative). NaN until a match has
  looked a token up. Without a host tier host hits are 0, so it is device / (device +
  miss).
- ``nodes``, ``evictable_leaves``, ``<component>_tombstones`` (the components after
  Full) and ``requests`` (running).

Markers: the failing steps (a violation, a failed expectation, an error nobody
expected) and, given breakpoint conditions (``model.debugging.breakpoints``, or any
``search.StepCondition``), the steps where one holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple, Optional

import numpy as np

from cache.observe.views import NodeRecord

from .search import all_hits, any_holds, scan, search
from .timeline import Timeline

POOL_COUNTERS = ("total", "available", "evictable", "protected", "held")
HIT_FIELDS = ("device_hit_tokens", "host_hit_tokens", "miss_tokens")
RECENT_STEPS = 256  # hit_rate_recent's window: a few hundred requests' worth of matches
HITS, TREE = "hit rate", "tree"  # the groups besides the pools


@dataclasses.dataclass(frozen=True)
class SeriesInfo:
    name: str
    group: str  # the chart it belongs on: a pool's name, HITS or TREE
    label: str  # its name on that chart


class Points(NamedTuple):
    """A series downsampled to buckets: each bucket's first step, lowest and highest value."""

    steps: np.ndarray
    low: np.ndarray
    high: np.ndarray


class RowMaker:
    """One step's row of numbers — the pools' counters, the hit fields, the tree counts,
    the running requests — from its totals and what it changed: the counts over the
    tree are kept up to date by each step's delta (and the records it replaced), never
    recounted. Shared by ``RunSeries`` and a store that keeps the rows as it writes."""

    def __init__(self, shape, initial: dict, initial_globals) -> None:
        self.pools: tuple[str, ...] = tuple(initial_globals.pools)
        self.tombstone_components: tuple[str, ...] = shape.components[1:]
        self._root = shape.root_id
        self._tree = [0] * (2 + len(self.tombstone_components))
        for record in initial.values():
            self._add(record, 1)

    def row(self, globals_, delta: Optional[dict] = None, before: Optional[dict] = None) -> tuple[int, ...]:
        for node_id, new in (delta or {}).items():
            self._add(before.get(node_id), -1)
            self._add(new, 1)
        row: list[int] = []
        for name in self.pools:
            pool = globals_.pools.get(name)
            row.extend((pool.total, pool.available, pool.evictable, pool.protected, pool.held)
                       if pool is not None else (0, 0, 0, 0, 0))
        metrics = globals_.metrics
        row.extend(metrics.get(f, 0) for f in HIT_FIELDS)
        row.extend(self._tree)
        row.append(len(globals_.requests))
        return tuple(row)

    def _add(self, record: Optional[NodeRecord], sign: int) -> None:
        if record is None or record.id == self._root:
            return
        counts = self._tree
        counts[0] += sign
        if record.evictable_leaf:
            counts[1] += sign
        for i, component in enumerate(record.components[1:], start=2):
            if component.value_len is None:
                counts[i] += sign


class RunSeries:
    """Every series of one timeline, kept up to date by ``refresh()``. A stored run
    (``urc run --store``) kept its rows as it ran: they are read from its file whole."""

    def __init__(self, timeline: Timeline, breakpoints: Sequence = ()) -> None:
        self.timeline = timeline
        self.breakpoints = tuple(breakpoints)  # search.StepCondition: a breakpoint's Condition
        store = timeline.store
        self._maker = RowMaker(store.shape, store.keyframes[0], store.globals[0])
        self.pools: tuple[str, ...] = self._maker.pools
        self.tombstone_components: tuple[str, ...] = self._maker.tombstone_components
        self.host = any(name.endswith("_host") for name in self.pools)
        self._rows: list[tuple[int, ...]] = []  # per step: the pools' counters, the hit fields, the tree counts
        self._read = 0  # steps read so far, the empty start included (a stored run's: its matrix's rows)
        self._failing: list[int] = []
        self._breaks: list[int] = []
        self._matrix: Optional[np.ndarray] = None
        self._values: dict[str, np.ndarray] = {}
        self.info: dict[str, SeriesInfo] = {}
        for pool in self.pools:
            for counter in (*POOL_COUNTERS, "unaccounted"):
                self.info[f"{pool}_{counter}"] = SeriesInfo(f"{pool}_{counter}", pool, counter)
        for name in ("hit_rate", "hit_rate_recent") + (("host_hit_rate",) if self.host else ()):
            self.info[name] = SeriesInfo(name, HITS, name.replace("_", " "))
        for name in ("nodes", "evictable_leaves", *(f"{c}_tombstones" for c in self.tombstone_components), "requests"):
            self.info[name] = SeriesInfo(name, TREE, name.replace("_", " "))
        stored = getattr(store, "series_matrix", None)
        if stored is not None:  # one read of the rows the run kept, and its indexes for the markers
            self._matrix = stored()
            self._read = len(self._matrix)
            self._failing = store.failing_indexes()
            self._breaks = self._all_hits()
        self.refresh()

    # ---- reading the timeline ------------------------------------------------------------------
    def refresh(self) -> int:
        """Read the steps the timeline gained since the last read; how many."""
        timeline, store = self.timeline, self.timeline.store
        start, end = self._read, len(timeline.records) + 1
        if start >= end:
            return 0
        for index in range(start, end):
            g = store.globals[index]
            if index:
                record = timeline.records[index - 1]
                if not record.passed:
                    self._failing.append(index)
                if self.breakpoints and self._breakpoint_holds(index):
                    self._breaks.append(index)
                self._rows.append(self._maker.row(g, store.deltas[index], store.befores[index]))
            else:
                self._rows.append(self._maker.row(g))
        self._read = end
        self._matrix = None
        self._values.clear()
        return end - start

    def set_breakpoints(self, conditions: Sequence, hits: Optional[list[int]] = None) -> None:
        """Mark where ``conditions`` hold instead (a viewer's breakpoints changed): only
        the markers are read again, and only if they changed (``hits``: already found,
        by ``find_hits`` on another thread)."""
        if tuple(conditions) == self.breakpoints:
            return
        self.breakpoints = tuple(conditions)
        self._breaks = self._all_hits() if hits is None else list(hits)

    def find_hits(self, conditions: Sequence, should_stop=lambda: False, progress=None,
                  lock=None, chunk: int = 512) -> Optional[list[int]]:
        """Every step where one of ``conditions`` holds, read ``chunk`` steps at a time
        (under ``lock``, for a timeline still loading), reporting (steps read, steps) to
        ``progress``; None if ``should_stop`` said so first."""
        hits, at, end = [], 0, self.steps
        while True:
            hit = None
            for hit, passed, _ in scan(self.timeline, conditions, at, lock=lock, chunk=chunk, limit=end):
                if progress is not None:
                    progress(hit[0] if hit is not None else at + passed, end)
                if should_stop():
                    return None
            if hit is None:
                return hits
            hits.append(at := hit[0])

    def _all_hits(self) -> list[int]:
        """Every step where a breakpoint holds: answered at once where it can be (the
        series, a stored run's indexes: ``search.all_hits``), else found by ``search``."""
        if not self.breakpoints:
            return []
        at_once = all_hits(self.timeline, self.breakpoints, self if self.steps >= len(self.timeline) else None)
        if at_once is not None:
            return at_once
        hits, at = [], 0
        while (hit := search(self.timeline, self.breakpoints, at)) is not None:
            hits.append(at := hit[0])
        return hits

    def _breakpoint_holds(self, index: int) -> bool:
        return any_holds(self.timeline, self.breakpoints, index) is not None

    # ---- the series ------------------------------------------------------------------------------
    @property
    def steps(self) -> int:
        """Steps read (the series have one more value: the empty start)."""
        return self._read - 1

    def names(self, group: Optional[str] = None) -> list[str]:
        return [n for n, i in self.info.items() if group is None or i.group == group]

    def groups(self) -> dict[str, list[str]]:
        """Chart -> its series, pools first, then the hit rate, then the tree."""
        out: dict[str, list[str]] = {}
        for name, info in self.info.items():
            out.setdefault(info.group, []).append(name)
        return out

    def select(self, wanted: Sequence[str]) -> list[str]:
        """Series by name or by chart (``full`` = every series of the Full pool, ``tree``,
        ``hit rate`` or ``hits``), in the order given, each once; an unknown name is a
        ``KeyError`` that lists the known ones."""
        groups = self.groups()
        out: list[str] = []
        for word in wanted:
            group = HITS if word == "hits" else word
            found = groups.get(group) if word not in self.info else [word]
            if found is None:
                raise KeyError(f"no series or chart {word!r}; series: {', '.join(self.info)}; "
                               f"charts: {', '.join(g if g != HITS else 'hits' for g in groups)}")
            out.extend(n for n in found if n not in out)
        return out

    def values(self, name: str) -> np.ndarray:
        """One value per step (0 = the empty start), as float64 (NaN: no value yet)."""
        found = self._values.get(name)
        if found is None:
            if name not in self.info:
                raise KeyError(f"no series {name!r}; known: {', '.join(self.info)}")
            found = self._values[name] = self._compute(name)
            found.flags.writeable = False
        return found

    def _column(self, i: int) -> np.ndarray:
        if self._matrix is None:
            self._matrix = np.array(self._rows, dtype=np.int64).reshape(len(self._rows), -1)
        return self._matrix[:, i]

    def _compute(self, name: str) -> np.ndarray:
        info = self.info[name]
        base = 5 * len(self.pools)
        if info.group in self.pools:
            first = 5 * self.pools.index(info.group)
            if info.label == "unaccounted":
                total, *parts = (self._column(first + k) for k in range(5))
                return (total - sum(parts)).astype(np.float64)
            return self._column(first + POOL_COUNTERS.index(info.label)).astype(np.float64)
        if info.group == HITS:
            device, host, miss = (self._column(base + k).astype(np.float64) for k in range(3))
            hits = host if name == "host_hit_rate" else device
            looked_up = device + host + miss
            if name == "hit_rate_recent":
                hits, looked_up = _window(hits, RECENT_STEPS), _window(looked_up, RECENT_STEPS)
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(looked_up > 0, hits / np.where(looked_up > 0, looked_up, 1), np.nan)
        tree = ["nodes", "evictable_leaves", *(f"{c}_tombstones" for c in self.tombstone_components), "requests"]
        return self._column(base + 3 + tree.index(name)).astype(np.float64)

    # ---- markers -----------------------------------------------------------------------------------
    @property
    def failing_steps(self) -> np.ndarray:
        """Steps that failed a check: an invariant, a fingerprint, an expectation."""
        return np.array(self._failing, dtype=np.int64)

    @property
    def breakpoint_steps(self) -> np.ndarray:
        """Steps where one of the breakpoint conditions holds."""
        return np.array(self._breaks, dtype=np.int64)

    @property
    def first_failure(self) -> Optional[int]:
        return self._failing[0] if self._failing else None

    # ---- for a chart ---------------------------------------------------------------------------------
    def points(self, name: str, width: int, start: int = 0, end: Optional[int] = None) -> Points:
        """``name`` over steps ``start..end`` in at most ``width`` buckets (a chart's columns)."""
        return downsample(self.values(name), width, start, end)

    def changes_at(self, name: str, step: int = 0, window: int = 0) -> Optional[int]:
        """The first step after ``step`` where series ``name`` leaves what it did (``changes_at``)."""
        return changes_at(self.values(name), step, window)

    def marker_runs(self, steps: np.ndarray, width: int, start: int = 0,
                    end: Optional[int] = None) -> list[tuple[int, int]]:
        """Marked steps in ``start..end`` as (first, last) runs, joined where fewer than a
        bucket of ``width`` apart: what a chart that wide can tell apart."""
        end = self.steps if end is None else end
        inside = steps[(steps >= start) & (steps <= end)]
        return runs(inside, max(1, -(-(end - start + 1) // max(1, width))))


# ---- pure functions over one series ----------------------------------------------------------------
def changes_at(values: np.ndarray, step: int, window: int = 0) -> Optional[int]:
    """The first step after ``step`` whose value leaves what the series did up to ``step``:
    with ``window`` 0 the value it had at ``step``, else the range (lowest to highest) it
    kept over the ``window`` steps before ``step`` and ``step`` itself. None when it never
    leaves. NaN is "no value": a series with none at ``step`` changes where it gets one.

    Read from the one timeline: ``changes_at(full_unaccounted, 0)`` is the step a slot
    leaked (nothing accounts for it from then on)."""
    n = len(values)
    if not 0 <= step < n:
        raise IndexError(f"step {step} is outside the series (steps 0..{n - 1})")
    kept = values[max(0, step - window): step + 1]
    after = values[step + 1:]
    if np.isnan(kept).all():
        left = ~np.isnan(after)
    else:
        low, high = np.nanmin(kept), np.nanmax(kept)
        left = (after < low) | (after > high)
    found = np.flatnonzero(left)
    return int(step + 1 + found[0]) if found.size else None


def downsample(values: np.ndarray, width: int, start: int = 0, end: Optional[int] = None) -> Points:
    """Steps ``start..end`` (inclusive; end defaults to the last) in at most ``width``
    buckets, each with its lowest and highest value (NaN only where a bucket has no
    value), so a spike of one step survives however long the run."""
    end = len(values) - 1 if end is None else min(end, len(values) - 1)
    start = max(0, start)
    part = values[start: end + 1]
    if part.size == 0:
        empty = np.empty(0)
        return Points(empty.astype(np.int64), empty, empty)
    if part.size <= width:
        return Points(np.arange(start, end + 1), part, part)
    edges = np.unique(np.linspace(0, part.size, max(1, width) + 1).astype(np.int64)[:-1])
    with np.errstate(invalid="ignore"):
        low, high = np.fmin.reduceat(part, edges), np.fmax.reduceat(part, edges)
    return Points(edges + start, low, high)


def runs(steps: np.ndarray, gap: int = 1) -> list[tuple[int, int]]:
    """Sorted steps as (first, last) runs: a step at most ``gap`` after the previous one
    joins its run."""
    if steps.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(steps) > gap)
    firsts = np.concatenate(([steps[0]], steps[breaks + 1]))
    lasts = np.concatenate((steps[breaks], [steps[-1]]))
    return [(int(a), int(b)) for a, b in zip(firsts, lasts)]


def _window(cumulative: np.ndarray, steps: int) -> np.ndarray:
    """What a cumulative count gained over the last ``steps`` steps, at every step."""
    earlier = np.concatenate((np.zeros(min(steps, cumulative.size)), cumulative[:-steps] if steps < cumulative.size
                              else np.empty(0)))
    return cumulative - earlier
