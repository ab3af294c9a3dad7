"""The running requests at this step — prefix, committed and inserted lengths, lock
(node and receipt), row ends, priority, chunked prefill, each component's request
state — and, in yellow, what this step did to each (the model's request diff); a
request the step ended is listed dimmed. ``y`` on a highlighted request asks why."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from ...model.scenarios.errors import printable
from ...model.timeline.request_diff import ENDED, RequestChange, request_cells
from ...model.timeline.step_view import StepView
from .badges import COMPONENT_STYLE
from .panel import Panel


class RequestsPanel(Panel, OptionList):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._rids: list[str] = []  # the request of each option, in order

    @property
    def highlighted_request(self) -> str | None:
        """The highlighted request's id (for ``why``), or None."""
        if self.highlighted is None or not 0 <= self.highlighted < len(self._rids):
            return None
        return self._rids[self.highlighted]

    def show(self, view: StepView) -> None:
        self.display = view.record is not None  # at the start nothing runs: room for the chapter's text
        keep = self.highlighted_request
        running = view.state.requests
        diff = view.request_diff
        self.clear_options()
        self._rids = []
        options = []
        for request in running:
            options.append(Option(_running(request, diff.get(request.rid))))
            self._rids.append(request.rid)
        for change in diff.changes:
            if change.status == ENDED:
                options.append(Option(_ended(change)))
                self._rids.append(change.rid)
        touched = len(diff.changes)
        self.border_subtitle = f"{len(running)} running" + (f", {touched} changed by this step" if touched else "")
        if not options:
            self.add_option(Option("no running requests", disabled=True))
            return
        self.add_options(options)
        self.highlighted = self._rids.index(keep) if keep in self._rids else 0  # y always has a request


def _running(request, change: RequestChange | None) -> Text:
    cells = request_cells(request)
    text = Text()
    text.append(f"{cells['req']} ", style="bold")
    text.append(f"prefix {cells['prefix']} / committed {cells['committed']}  inserted {cells['inserted']}  "
                f"lock {cells['locked']}  prio {cells['priority']}")
    if cells["state"]:
        text.append(f"  {cells['state']}", style="bold magenta")
    text.append(f"\n  row {cells['row']}", style="dim")
    for name, fields in request.components:
        if fields:
            text.append(f"  {name} ", style=f"bold {COMPONENT_STYLE.get(name, 'white')}")
            text.append(" ".join(f"{k}={v}" for k, v in _shown(fields)))
    if change is not None:
        text.append("\n  ▲ " + "; ".join(change.lines), style="yellow")
    return text


def _ended(change: RequestChange) -> Text:
    text = Text()
    text.append(f"{printable(change.rid)} ", style="bold dim")
    text.append("; ".join(change.lines), style="dim yellow")
    return text


def _shown(fields) -> list[tuple[str, str]]:
    out = []
    for key, value in fields:
        if isinstance(value, tuple):
            value = ",".join(map(str, value)) or "–"
        out.append((key, "–" if value is None else printable(value)))
    return out
