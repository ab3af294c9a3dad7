"""Every checked step of the chapter — index, op, key, pass/fail — as a list to jump
from; the current step highlighted. Grows while a trace loads."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from ...model.timeline.fmt import fields_text
from ...model.timeline.step_view import StepView
from ...model.timeline.timeline import StepRecord
from ..messages import StepChosen
from .panel import Panel

LINE_WIDTH = 34  # one line per step: the 40-column panel less its border, padding and scrollbar


def step_line(record: StepRecord) -> Text:
    mark = ("✓", "green") if record.passed else ("✗", "bold red")
    text = Text(f"{record.index:>5} ", style="dim")
    text.append(mark[0], style=mark[1])
    text.append(f" {record.step.op}", style="bold")
    args = fields_text(record.step.fields)
    room = max(6, LINE_WIDTH - len(text) - 1)
    text.append(f" {args}" if len(args) <= room else f" {args[:room - 1]}…")
    return text


class StepList(Panel, OptionList):
    _measured_width: int | None = None  # the content width at the last resize

    def reset(self) -> None:
        self.clear_options()
        self.add_option(Option(Text("    0   the start (empty cache)", style="dim"), id="s0"))

    def extend(self, records: list[StepRecord]) -> None:
        self.add_options(Option(step_line(r), id=f"s{r.index}") for r in records)

    def show(self, view: StepView) -> None:
        if view.step < self.option_count:
            self.highlighted = view.step

    def _on_resize(self, event: events.Resize) -> None:
        """OptionList re-measures every option after any resize (~20 ms at 10,000 steps,
        whenever the panels above or below change height with the step shown); an
        option's height depends only on the width, so keep its cache while that holds."""
        width = self.scrollable_content_region.width
        if width == self._measured_width:
            event.prevent_default()  # OptionList._on_resize, the cache clear, is not run
            self.refresh()
        self._measured_width = width

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self.post_message(StepChosen(int(event.option.id[1:])))
