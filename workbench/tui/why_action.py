"""``y``: the question the user is pointing at, answered by the model (``model.debugging.why``
and its siblings). A mixin of ``WorkbenchApp``: the binding table's ``why`` lands here."""

from __future__ import annotations

from ..model.scenarios.errors import one_line
from .screens.why import WhyScreen
from .widgets.events_panel import EventsPanel
from .widgets.requests_panel import RequestsPanel
from .widgets.sessions_panel import SessionsPanel
from .widgets.tree_panel import TreePanel


class WhyAction:
    """Needs the app's ``cursor``, ``selected``, ``focused``, ``notify`` and ``push_screen``."""

    def action_why(self) -> None:
        """Explain the highlighted event, request or session of the focused list; on a match
        step (or one whose failed check is its match's) why the match stopped, unless the
        tree is focused; else the selected node, or the step's match. A focused list with
        nothing to ask about says so above the answer it gives instead."""
        from ..model.debugging.why import asks_about_its_match, why_event, why_match, why_node
        from ..model.debugging.why_request import why_request
        from ..model.debugging.why_session import why_session

        cursor, events, requests = self.cursor, self.query_one(EventsPanel), self.query_one(RequestsPanel)
        sessions = self.query_one(SessionsPanel)
        lists = {requests: "request", sessions: "session", events: "event"}
        note = ""
        try:
            with cursor.lock:
                if self.focused is requests and requests.highlighted_request is not None:
                    answer = why_request(cursor.timeline, cursor.step, requests.highlighted_request)
                elif self.focused is sessions and sessions.highlighted_session is not None:
                    answer = why_session(cursor.timeline, cursor.step, sessions.highlighted_session)
                elif self.focused is events and events.highlighted_event is not None and cursor.step:
                    answer = why_event(cursor.timeline, cursor.step, events.highlighted_event)
                else:
                    if self.focused in lists:
                        note = f"no {lists[self.focused]} to explain at step {cursor.step:,}; instead:"
                    if cursor.record is not None and asks_about_its_match(cursor.record) \
                            and self.focused is not self.query_one(TreePanel):  # the followed node is not the question
                        answer = why_match(cursor.timeline, cursor.step)
                    elif self.selected is not None:
                        answer = why_node(cursor.timeline, cursor.step, self.selected)
                    else:
                        answer = why_match(cursor.timeline, cursor.step)
        except ValueError as exc:
            self.notify(one_line(str(exc)), severity="warning", timeout=8, markup=False)  # it names a file's id
            return
        self.push_screen(WhyScreen(answer, note))
