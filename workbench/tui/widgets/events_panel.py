"""The current step's events, each with its cause; choosing one selects its node."""

from __future__ import annotations

from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from ...model.fmt import event_text
from ...model.timeline import StepRecord


class EventsPanel(OptionList):
    class NodeChosen(Message):
        def __init__(self, node_id: int) -> None:
            super().__init__()
            self.node_id = node_id

    def show_step(self, record: StepRecord | None) -> None:
        self.clear_options()
        events = record.events if record is not None else ()
        if not events:
            self.add_option(Option("no events (the start, or an op that changed nothing)", disabled=True))
            return
        self.add_options(Option(event_text(e), id=f"e{i}") for i, e in enumerate(events))
        self._events = events

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        index = int(event.option.id[1:]) if event.option.id else -1
        node = self._events[index].node if 0 <= index < len(getattr(self, "_events", ())) else None
        if node is not None:
            self.post_message(self.NodeChosen(node))
