"""Everything a viewer's panels show for one step, in one object: the TUI builds one per
step (``TimelineCursor.view``) and hands it to every panel's ``show(view)``, so a new
panel reads what it needs from here and nothing else changes.

The dearer reads (the diff, the previous state, the tree view's rows) are computed
on first use and kept, so a panel that does not read them costs nothing.
"""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager
from functools import cached_property
from typing import Optional, Protocol

from cache.config.reference import config_line

from .diff import StateDiff
from .request_diff import RequestDiff, step_request_diff
from .shown_sessions import SessionRow, session_rows
from ..scenarios.errors import printable
from ..scenarios.scenario import Scenario
from .shown_tree import ShownTree
from .states import TimelineState
from .timeline import StepRecord, Timeline


class ViewSource(Protocol):
    """What a view reads from the cursor that made it (``TimelineCursor``), named here
    so the view needs nothing from the cursor's module."""

    lock: AbstractContextManager
    timeline: Timeline

    def steps_touching(self, node_id: int) -> list[int]: ...


_KEPT = ("diff", "previous_state", "tree", "request_diff", "session_rows")  # what a re-selection keeps


@dataclasses.dataclass(eq=False)
class StepView:
    cursor: ViewSource
    chapter_index: int
    chapters: int
    scenario: Scenario
    step: int
    total: int  # steps in the chapter's file
    available: int  # steps checked so far
    record: Optional[StepRecord]  # the step that led here (None at the start)
    state: TimelineState
    selected: Optional[int]  # the node the panels show in detail (the step's own, or the user's choice)
    divergence: Optional[tuple[int, str]] = None  # where the chapter first diverged from SGLang (step, text)
    session: Optional[str] = None  # the session whose nodes the tree highlights (the user's choice)

    @property
    def config_line(self) -> str:
        """The chapter's cache in one line: components, page, window, model options."""
        return printable(config_line(self.scenario.config))

    @cached_property
    def diff(self) -> Optional[StateDiff]:
        """What this step changed (None at the start)."""
        if not self.step:
            return None
        with self.cursor.lock:
            return self.cursor.timeline.diff(self.step - 1, self.step)

    @cached_property
    def request_diff(self) -> RequestDiff:
        """What this step did to each running request (empty at the start)."""
        with self.cursor.lock:
            return step_request_diff(self.cursor.timeline, self.step)

    @cached_property
    def previous_state(self) -> TimelineState:
        with self.cursor.lock:
            return self.cursor.timeline.state_after(max(0, self.step - 1))

    @cached_property
    def tree(self) -> ShownTree:
        """The tree view's rows: chains folded, ghosts, marks (``model.shown_tree``)."""
        return ShownTree(self.state, self.diff)

    @property
    def heading(self) -> str:
        """``step 3/14, 9 checked · chapter 1/3 · tour``: what changes first, so a narrow
        panel that cuts its title cuts the name."""
        chapter = f" · chapter {self.chapter_index + 1}/{self.chapters}" if self.chapters > 1 else ""
        loading = f", {self.available:,} checked" if self.available < self.total else ""
        return f"step {self.step:,}/{self.total:,}{loading}{chapter} · {printable(self.scenario.name)}"

    def steps_touching(self, node_id: int) -> list[int]:
        return self.cursor.steps_touching(node_id)

    @cached_property
    def session_rows(self) -> tuple[SessionRow, ...]:
        """The sessions at this step, one row each (``model.shown_sessions``)."""
        return session_rows(self.state)

    @property
    def chosen_session(self) -> Optional[SessionRow]:
        """The highlighted session's row (None: none chosen, or gone at this step)."""
        return next((row for row in self.session_rows if row.sid == self.session), None) if self.session else None

    def selecting(self, node_id: Optional[int]) -> StepView:
        """The same step with another node selected (what it has computed is kept)."""
        return self._replacing(selected=node_id)

    def choosing_session(self, sid: Optional[str]) -> StepView:
        """The same step with another session's nodes highlighted."""
        return self._replacing(session=sid)

    def _replacing(self, **changes) -> StepView:
        view = dataclasses.replace(self, **changes)
        view.__dict__.update({k: v for k, v in self.__dict__.items() if k in _KEPT})
        return view
