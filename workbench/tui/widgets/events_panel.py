"""The current step's events, each with its cause; choosing one selects its node."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from ...model.timeline.fmt import event_text
from ...model.timeline.step_view import StepView
from ...model.timeline.timeline import StepRecord
from ..messages import NodeChosen
from .panel import Panel


class EventsPanel(Panel, OptionList):
    """``only`` filters by component (``None``: every event); ``cycle_filter`` steps it."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.only: str | None = None
        self._record: StepRecord | None = None
        self._events: tuple = ()

    def cycle_filter(self, components: tuple[str, ...]) -> None:
        choices = (None, *components)
        self.only = choices[(choices.index(self.only) + 1) % len(choices)] if self.only in choices else None
        self.border_subtitle = f"only {self.only}" if self.only else ""
        self.show_step(self._record)

    def show(self, view: StepView) -> None:
        self.show_step(view.record)

    def show_step(self, record: StepRecord | None) -> None:
        self._record = record
        self.clear_options()
        events = record.events if record is not None else ()
        if self.only is not None:
            events = tuple(e for e in events if e.component == self.only)
        self._events = events
        if not events:
            why = f"no {self.only} events" if self.only else "no events (the start, or an op that changed nothing)"
            self.add_option(Option(why, disabled=True))
            return
        self.add_options(Option(Text(event_text(e, record.index)), id=f"e{i}") for i, e in enumerate(events))  # Text: no markup
        self.highlighted = 0  # y always has an event

    @property
    def highlighted_event(self) -> int | None:
        """The highlighted event's index among the step's events (for ``why``)."""
        if self.highlighted is None or self._record is None or not 0 <= self.highlighted < len(self._events):
            return None
        chosen = self._events[self.highlighted]
        return next((i for i, e in enumerate(self._record.events) if e is chosen), None)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        index = int(event.option.id[1:]) if event.option.id else -1
        node = self._events[index].node if 0 <= index < len(self._events) else None
        if node is not None:
            self.post_message(NodeChosen(node))
