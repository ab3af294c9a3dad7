"""Every checked step of the chapter — index, op, key, pass/fail — as a list to jump
from; the current step highlighted. Grows while a trace loads."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual import events
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from ...model.scenarios.errors import printable
from ...model.timeline.fmt import fields_text
from ...model.timeline.step_view import StepView
from ...model.timeline.timeline import StepRecord
from ..messages import StepChosen
from .panel import Panel

def _start() -> Option:
    return Option(Text("    0   the start (empty cache)", style="dim"), id="s0")


LINE_WIDTH = 34  # one line per step: the 40-column panel less its border, padding and scrollbar


def step_line(record: StepRecord) -> Text:
    mark = ("✓", "green") if record.passed else ("✗", "bold red")
    text = Text(f"{record.index:>5} ", style="dim")
    text.append(mark[0], style=mark[1])
    text.append(f" {printable(record.step.op)}", style="bold")
    args = fields_text(record.step.fields)
    room = max(6, LINE_WIDTH - len(text) - 1)
    text.append(f" {args}" if len(args) <= room else f" {args[:room - 1]}…")
    return text


WINDOW = 400  # a stored run's steps listed at once, around the current one


class StepList(Panel, OptionList):
    """Every step, or for a stored run (millions of steps, read from disk) a window of
    ``WINDOW`` around the current step, moved when the cursor leaves it."""

    _measured_width: int | None = None  # the content width at the last resize
    _stored: Sequence[StepRecord] | None = None  # a stored run's records, listed a window at a time
    _window = (0, 0)  # steps first..last listed (stored run)

    def reset(self, stored: Sequence[StepRecord] | None = None) -> None:
        self.clear_options()
        self._stored, self._window = stored, (0, -1)
        if stored is None:
            self.add_option(_start())

    def extend(self, records: list[StepRecord]) -> None:
        self.add_options(Option(step_line(r), id=f"s{r.index}") for r in records)

    def show(self, view: StepView) -> None:
        if self._stored is not None:
            self._list_around(view.step)
            first = self._window[0]
            self.highlighted = view.step - first + (first > 0)
        elif view.step < self.option_count:
            self.highlighted = view.step

    def _list_around(self, step: int) -> None:
        first, last = self._window
        total = len(self._stored)
        clear_above = step >= first + WINDOW // 8 or first == 0
        clear_below = step <= last - WINDOW // 8 or last == total
        if first <= step <= last and clear_above and clear_below:
            return
        first = max(0, min(step - WINDOW // 2, total - WINDOW))
        last = min(total, first + WINDOW)
        self.clear_options()
        if first:
            self.add_option(Option(Text(f"      … steps 0–{first - 1:,} above (g: go to a step)", style="dim"),
                                   disabled=True))
        else:
            self.add_option(_start())
        self.extend(self._stored[max(0, first - 1) if first else 0:last])
        if last < total:
            self.add_option(Option(Text(f"      … {total - last:,} more steps", style="dim"), disabled=True))
        self._window = (first, last)

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
