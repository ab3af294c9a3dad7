"""Where a viewer stands in one or more timelines (the tour's chapters, or a trace),
and the commands that move it. The TUI renders this and sends it these commands; it
never touches a runner or the cache.

Loading runs the scenario in a background thread step by step (``load``), so a viewer
can show the first steps of a long trace while the rest is checked; ``lock`` guards
the timeline between that thread and readers.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Optional

from ..scenarios.scenario import Scenario, ScenarioError, StepAppender
from ..timeline.diff import StateDiff
from ..timeline.search import quick, scan, search
from ..timeline.series import RunSeries
from ..timeline.states import TimelineState
from ..timeline.step_view import StepView
from ..timeline.stored import DiskTimeline, StoredRun
from ..timeline.timeline import StepRecord, Timeline
from .breakpoints import Condition, parse_condition
from .why import node_steps

if TYPE_CHECKING:
    from ..timeline.runner import Runner


@dataclasses.dataclass
class Chapter:
    """One scenario (run as it is read) or stored run. A scenario's runner is built
    on first use: building it imports the cache and torch (about a second), so a
    viewer can show the chapter's name and text while a worker builds it (``prepare``)."""

    source: Scenario | DiskTimeline
    loaded: bool = False
    appender: Optional[StepAppender] = None  # checks steps added at the end, made on first use
    unsaved_ops: int = 0  # live ops run since the chapter was last saved (a followed trace's steps are not)
    series: Optional[RunSeries] = None  # its numbers per step, built on first use (``TimelineCursor.series``)
    _runner: Runner | StoredRun | None = None
    _building: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if isinstance(self.source, DiskTimeline):  # a stored run reads its file: quick, no cache
            self._runner, self.loaded = StoredRun(self.source), True

    @property
    def ready(self) -> bool:
        """Its runner is built: its states can be read."""
        return self._runner is not None

    @property
    def runner(self) -> Runner | StoredRun:
        return self._runner if self._runner is not None else self.build()

    def build(self) -> Runner | StoredRun:
        """The runner, built once (whichever thread asks first; the other waits)."""
        with self._building:
            if self._runner is None:
                from ..timeline.runner import Runner

                self._runner = Runner(self.source)
            return self._runner

    @property
    def scenario(self) -> Scenario:
        if self._runner is None:
            return self.source
        return self._runner.scenario  # grows with live ops and a followed trace

    @property
    def timeline(self) -> Timeline:
        return self.runner.timeline

    @property
    def read_only(self) -> bool:
        """A stored run: its steps come from a file, and no live op can be added."""
        return isinstance(self.source, DiskTimeline)


DEFAULT_BREAKPOINTS = ("violation", "failed")
SCAN_CHUNK = 512  # steps a breakpoint scan reads per hold of the lock (and per progress report)
QUICK_STEPS = 1_000  # a chapter this short is scanned at once (well under 100 ms)


class TimelineCursor:
    """A position (chapter, step) plus the reads a viewer needs at that position."""

    def __init__(self, scenarios: list[Scenario | DiskTimeline]) -> None:
        """One chapter per scenario (run as it is read) or stored run (``urc run
        --store``: already checked, read from its file, read-only)."""
        if not scenarios:
            raise ValueError("a cursor needs at least one scenario")
        self.chapters = [Chapter(source) for source in scenarios]
        self.chapter_index = 0
        self.step = 0
        self.lock = threading.RLock()
        self.breakpoints: list[Condition] = []  # the user's; empty: stop at any failure (DEFAULT_BREAKPOINTS)

    # ---- loading ---------------------------------------------------------------------------------
    def prepare(self, chapter: int) -> None:
        """Build the chapter's runner (the cache, torch with it): call from a worker thread."""
        self.chapters[chapter].build()

    def load(self, chapter: int, progress: Optional[Callable[[int, int], None]] = None,
             should_stop: Callable[[], bool] = lambda: False) -> None:
        """Run one chapter to its end (call from a worker thread)."""
        target = self.chapters[chapter]
        total = len(target.scenario.steps)
        while not target.runner.done and not should_stop():
            with self.lock:
                target.runner.step()
            if progress is not None:
                progress(len(target.timeline), total)
        target.loaded = target.runner.done
        if target.loaded:
            from ..timeline.runner import settle

            settle(target.timeline)

    def append(self, raw: dict, line: int = 0) -> StepRecord:
        """Add one step at the end of the current chapter (a live op) and run it,
        checked like any other. A step the scenario would refuse raises
        ``ScenarioError`` with the same message and changes nothing."""
        record = self.extend([(raw, line)])[0]
        self.chapter.unsaved_ops += 1
        return record

    def unsaved_ops(self) -> dict[str, int]:
        """Chapters with live ops not saved since they ran: {scenario path or name: ops}
        (what quitting would lose)."""
        return {c.scenario.path or c.scenario.name: c.unsaved_ops for c in self.chapters if c.unsaved_ops}

    def saved(self) -> None:
        """The current chapter was just saved whole, live ops included."""
        self.chapter.unsaved_ops = 0

    def extend(self, steps: list[tuple[dict, int]]) -> list[StepRecord]:
        """Add steps (raw fields, line) at the end of the current chapter and run them
        (a followed trace's new lines). Steps before a refused one are kept and run;
        then the refusal is raised. The chapter must have finished loading."""
        chapter = self.chapter
        if chapter.read_only:
            raise chapter.runner.refuse()
        if not chapter.loaded:
            raise ScenarioError("wait for the chapter to finish loading", chapter.scenario.path)
        with self.lock:
            if chapter.appender is None:
                chapter.appender = StepAppender(chapter.scenario)
            refused: Optional[ScenarioError] = None
            for raw, line in steps:
                try:
                    chapter.appender.append(raw, line)
                except ScenarioError as exc:
                    refused = exc
                    break
            chapter.runner.extend(chapter.appender.scenario)
            records = []
            while not chapter.runner.done:
                records.append(chapter.runner.step())
        if refused is not None:
            raise refused
        return records

    def names(self) -> dict[str, list[str]]:
        """Live names the current chapter's next step may use (for completion)."""
        chapter = self.chapter
        if chapter.read_only:
            return {}
        if chapter.appender is None:
            chapter.appender = StepAppender(chapter.scenario)
        return chapter.appender.names

    # ---- position ----------------------------------------------------------------------------------
    @property
    def chapter(self) -> Chapter:
        return self.chapters[self.chapter_index]

    @property
    def timeline(self) -> Timeline:
        return self.chapter.timeline

    @property
    def available(self) -> int:
        """Steps checked so far in this chapter (all of them once loaded)."""
        return len(self.timeline)

    @property
    def total(self) -> int:
        return len(self.chapter.scenario.steps)

    def go(self, step: int) -> int:
        """Move to ``step`` (clamped to what is loaded); returns where the cursor is."""
        self.step = max(0, min(step, self.available))
        return self.step

    def next(self) -> int:
        return self.go(self.step + 1)

    def previous(self) -> int:
        return self.go(self.step - 1)

    def first(self) -> int:
        return self.go(0)

    def last(self) -> int:
        return self.go(self.available)

    def switch(self, chapter: int) -> int:
        """Open another chapter at its start; returns the chapter index."""
        self.chapter_index = max(0, min(chapter, len(self.chapters) - 1))
        self.step = 0
        return self.chapter_index

    # ---- reads -------------------------------------------------------------------------------------
    @property
    def record(self) -> Optional[StepRecord]:
        """The step that led to the current state (None at the start)."""
        return self.timeline.records[self.step - 1] if self.step else None

    @property
    def state(self) -> TimelineState:
        with self.lock:
            return self.timeline.state_after(self.step)

    @property
    def previous_state(self) -> TimelineState:
        with self.lock:
            return self.timeline.state_after(max(0, self.step - 1))

    def diff(self) -> Optional[StateDiff]:
        """What the current step changed (None at the start)."""
        if not self.step:
            return None
        with self.lock:
            return self.timeline.diff(self.step - 1, self.step)

    def view(self, follow: bool = True, selected: Optional[int] = None,
             divergence: Optional[tuple[int, str]] = None) -> StepView:
        """What every panel shows at this position: one object per step. ``follow``
        selects the node the step is about, else ``selected`` stays selected."""
        with self.lock:
            state, available = self.timeline.state_after(self.step), self.available
        return StepView(self, self.chapter_index, len(self.chapters), self.chapter.scenario, self.step, self.total,
                        available, self.record, state, self.focus_node() if follow else selected, divergence)

    def steps_touching(self, node_id: int) -> list[int]:
        """Steps whose events name the node: the index ``why`` answers from (one per
        timeline, extended as steps arrive)."""
        with self.lock:
            return list(node_steps(self.timeline)(node_id))

    def focus_node(self) -> Optional[int]:
        """The node the current step is about: the first node its events name that is
        still in the tree, else the first one (a removed node shows as a ghost)."""
        record = self.record
        if record is None:
            return None
        named = [e.node for e in record.events if e.node is not None and e.node != self.state.root_id]
        live = [n for n in named if n in self.state]
        return (live or named or [None])[0]

    # ---- breakpoints -------------------------------------------------------------------------------
    def add_breakpoint(self, text: str) -> Condition:
        """Parse and add a condition (``ConditionError`` on a bad one; nothing added)."""
        config = self.chapter.scenario.config
        condition = parse_condition(text, config["components"], bool(config.get("hicache")))
        if all(c.text != condition.text for c in self.breakpoints):
            self.breakpoints.append(condition)
        return condition

    def remove_breakpoint(self, text: str) -> bool:
        before = len(self.breakpoints)
        self.breakpoints = [c for c in self.breakpoints if c.text != text]
        return len(self.breakpoints) != before

    def watch(self, node_id: int) -> Condition:
        """Stop where this node changes (``w`` on the selected node)."""
        return self.add_breakpoint(f"node={node_id}")

    @property
    def active_breakpoints(self) -> list[Condition]:
        return self.breakpoints or [parse_condition(t) for t in DEFAULT_BREAKPOINTS]

    def series(self) -> RunSeries:
        """The chapter's numbers per step (the charts, and the scans of breakpoints over
        counters): built once, then read on as the chapter grows."""
        chapter = self.chapter
        with self.lock:
            if chapter.series is None:
                chapter.series = RunSeries(chapter.timeline)
            else:
                chapter.series.refresh()
            return chapter.series

    def breakpoints_quick(self) -> bool:
        """Can ``c`` / ``C`` answer at once (a short chapter; counters; a stored run's
        failures)? Else a viewer scans off its own thread (``find_breakpoint`` with a stop
        and progress)."""
        return len(self.timeline) <= QUICK_STEPS or quick(self.timeline, self.active_breakpoints)

    def find_breakpoint(self, forward: bool = True, should_stop: Callable[[], bool] = lambda: False,
                        progress: Optional[Callable[[int, int], None]] = None) -> Optional[tuple[int, Condition]]:
        """The nearest step after (before) this one where a breakpoint holds, without
        moving; None if none does, or ``should_stop`` said so first. A long scan reads
        ``SCAN_CHUNK`` steps at a time, holding the lock for one chunk only, and reports
        (steps passed, steps to pass) to ``progress`` after each."""
        with self.lock:
            conditions, start, timeline = self.active_breakpoints, self.step, self.timeline
            if self.breakpoints_quick():
                counters = any(getattr(c, "counters_only", False) for c in conditions)
                return search(timeline, conditions, start, forward, series=self.series() if counters else None)
        for hit, passed, total in scan(timeline, conditions, start, forward, self.lock, SCAN_CHUNK):
            if hit is not None:
                return hit
            if should_stop():
                return None
            if progress is not None:
                progress(passed, total)
        return None

    def run_to_breakpoint(self, forward: bool = True) -> Optional[tuple[int, Condition]]:
        """``c`` / ``C``: move to the nearest step after (before) this one where a
        breakpoint holds; (step, condition), or None and the cursor stays."""
        hit = self.find_breakpoint(forward)
        if hit is not None:
            self.go(hit[0])
        return hit
