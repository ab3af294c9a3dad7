"""The sessions at this step (``model.shown_sessions``): per session its generation, its
state (open, streaming, closing, in flight, closed ✝), its frontier nodes per component,
what its coverage holds per component and its streaming slot. Shown only when the
scenario uses sessions. A row is always highlighted (``y`` has a session); while the
panel has focus, the highlighted session's nodes are highlighted in the tree."""

from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from ...model.scenarios.errors import printable
from ...model.timeline.shown_sessions import SessionRow, has_sessions
from ...model.timeline.step_view import StepView
from ...render.tree_view import SESSION_STYLE
from ..messages import SessionChosen
from .badges import COMPONENT_STYLE
from .panel import Panel


class SessionsPanel(Panel, OptionList):
    follows_session = True  # marks the chosen one

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._sids: list[str] = []  # the session of each option, in order
        self._chosen: Optional[str] = None

    @property
    def highlighted_session(self) -> Optional[str]:
        if self.highlighted is None or not 0 <= self.highlighted < len(self._sids):
            return None
        return self._sids[self.highlighted]

    def show(self, view: StepView) -> None:
        self.display = has_sessions(view.scenario) and view.record is not None  # none open at the start
        if not self.display:
            return
        rows = view.session_rows
        self._chosen = view.session
        keep = view.session or self.highlighted_session
        self.clear_options()
        self._sids = [row.sid for row in rows]
        live = sum(1 for row in rows if "closed" not in row.state)
        self.border_subtitle = f"{len(rows) - live} closed, {live} open" if len(rows) > live else f"{live} open"
        if not rows:
            self.add_option(Option("no sessions", disabled=True))
            return
        self.add_options([Option(session_text(row, row.sid == view.session)) for row in rows])
        self.highlighted = self._sids.index(keep) if keep in self._sids else 0

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if self.has_focus:
            self._choose()

    def on_focus(self) -> None:
        self._choose()

    def _choose(self) -> None:
        sid = self.highlighted_session
        if sid is not None and sid != self._chosen:
            self._chosen = sid
            self.post_message(SessionChosen(sid))


def session_text(row: SessionRow, chosen: bool = False) -> Text:
    """``s1 gen 1  open`` then its frontier, holdings and slot."""
    cells = row.cells()
    text = Text()
    text.append(f"{printable(row.sid)} ", style="bold reverse" if chosen else "bold")
    text.append(f"gen {cells['gen']}  ")
    text.append(row.state, style="dim" if "closed" in row.state else "bold magenta")
    for name, ids in row.frontier:
        text.append(f"\n  {name} ", style=f"bold {COMPONENT_STYLE.get(name, 'white')}")
        text.append("§ " + ",".join(f"#{n}" for n in ids), style=SESSION_STYLE)
        held = dict(row.held).get(name, 0)
        covered = len(dict(row.coverage).get(name, ()))
        text.append(f"  holds {held} in {covered} node{'s' if covered != 1 else ''}", style="dim")
    if row.slot is not None:
        text.append(f"\n  slot {printable(row.slot)}", style="yellow")
    return text
