"""``l``: the whole run as charts, one line per series of a chart (a pool's counters, the
hit rate, the tree's counts), drawn from the run's series model
(``model.timeline.series``: read from the timeline, never re-run), with the failing
steps, the breakpoints and a cursor marked under them. ←/→ move the cursor a column
(shift: ten), ↑/↓ choose a series, tab the next chart, ``c`` jumps the cursor to where
the chosen series next changes, enter goes to the cursor's step, esc goes nowhere. A
click on a series' line puts the cursor at that point and chooses the series."""

from __future__ import annotations

from typing import Optional

import numpy as np
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from ...model.timeline.series import RunSeries

BARS = "▁▂▃▄▅▆▇█"


def sparkline(low: np.ndarray, high: np.ndarray, lo: float, hi: float) -> str:
    """One character per bucket: its highest value on the series' whole-run scale."""
    if not len(high):
        return ""
    span = hi - lo if hi > lo else 1.0
    levels = np.clip(np.round((np.nan_to_num(high, nan=lo) - lo) / span * (len(BARS) - 1)), 0, len(BARS) - 1)
    return "".join(" " if np.isnan(h) else BARS[int(k)] for h, k in zip(high, levels))


class ChartsScreen(ModalScreen[Optional[int]]):
    BINDINGS = [
        Binding("escape,q,l", "dismiss(None)", "close"),
        Binding("left", "move(-1)", "◀"), Binding("right", "move(1)", "▶"),
        Binding("shift+left", "jump(-1)", "◀◀", show=False), Binding("shift+right", "jump(1)", "▶▶", show=False),
        Binding("home", "to_end(False)", "first", show=False), Binding("end", "to_end(True)", "last", show=False),
        Binding("up", "series(-1)", "series ↑"), Binding("down", "series(1)", "series ↓"),
        Binding("tab", "chart(1)", "next chart"), Binding("shift+tab", "chart(-1)", "previous chart", show=False),
        Binding("c", "changes", "where it changes"),
        Binding("enter", "go", "go to step"),
    ]

    def __init__(self, series: RunSeries, step: int) -> None:
        super().__init__()
        self.series = series
        self.charts = list(series.groups().items())
        self.chart = 0
        self.chosen = 0  # the series of the chart the cursor reads and `c` follows
        self.step = step  # the cursor, as a step
        self.note = ""
        names = [n for _, group in self.charts for n in group]
        self.name_width = max(len(series.info[n].label) for n in names)
        self.value_width = max(5, *(_value_width(series.values(n)) for n in names))
        self.label_width = self.name_width + self.value_width + 2  # columns before a line's first point

    def compose(self) -> ComposeResult:
        with Vertical(id="charts"):
            yield Static(id="charts-text")

    def on_mount(self) -> None:
        self.redraw()

    def on_resize(self) -> None:
        self.redraw()

    # ---- drawing -----------------------------------------------------------------------------------
    @property
    def width(self) -> int:
        return max(8, self.query_one("#charts-text").size.width - self.label_width - 1)

    def _points(self, name: str):
        return self.series.points(name, self.width)

    def _column(self, steps: np.ndarray, step: int) -> int:
        return max(0, int(np.searchsorted(steps, step, side="right")) - 1)

    def redraw(self) -> None:
        group, names = self.charts[self.chart]
        text = Text()
        text.append(f"{group}  ", style="bold")
        text.append(f"({self.chart + 1}/{len(self.charts)} charts, steps 0–{self.series.steps:,})\n", style="dim")
        steps = None
        for i, name in enumerate(names):
            values = self.series.values(name)
            points = self._points(name)
            steps = points.steps
            lo, hi = float(np.nanmin(values)) if np.isfinite(values).any() else 0.0, \
                float(np.nanmax(values)) if np.isfinite(values).any() else 0.0
            now = values[min(self.step, len(values) - 1)]
            label = f"{self.series.info[name].label:<{self.name_width}} {_fmt(now):>{self.value_width}} "
            line = sparkline(points.low, points.high, lo, hi)
            col = self._column(steps, self.step)
            style = "bold reverse" if i == self.chosen else ""
            text.append(label, style=style)
            text.append(line[:col], style="green")
            text.append(line[col:col + 1] or " ", style="bold yellow reverse")
            text.append(line[col + 1:] + "\n", style="green")
        if steps is not None:
            text.append(self._marks(steps))
            text.append(self._axis(steps))
        text.append(f"\ncursor at step {self.step:,}", style="bold")
        if self.note:
            text.append(f"  {self.note}", style="yellow")
        text.append("\n←/→ a step (shift: a column)  home/end  ↑/↓ series  tab chart  c where it changes  enter go  "
                    "esc close",
                    style="dim")
        self.query_one("#charts-text", Static).update(text)

    def _marks(self, steps: np.ndarray) -> Text:
        """A line under the charts: ▼ failing steps (red), ◆ breakpoints (blue), ▲ the cursor."""
        row = [" "] * len(steps)
        styles = [""] * len(steps)
        for marked, glyph, style in ((self.series.breakpoint_steps, "◆", "blue"),
                                     (self.series.failing_steps, "▼", "bold red")):
            for step in marked:
                col = self._column(steps, int(step))
                row[col], styles[col] = glyph, style
        col = self._column(steps, self.step)
        row[col], styles[col] = "▲", "bold yellow"
        text = Text(" " * self.label_width)
        for glyph, style in zip(row, styles):
            text.append(glyph, style=style)
        return text + Text("\n")

    def _axis(self, steps: np.ndarray) -> Text:
        """The step axis: a column's first step written from that column, others where
        they fit with a gap, and the run's last step ending at the last column."""
        row = [" "] * len(steps)
        last = f"{self.series.steps:,}"
        end = len(steps) - len(last)  # the last step is written to end at the last column
        gap = 10
        col = 0
        while col < end - gap:
            word = f"{int(steps[col]):,}"
            if col + len(word) + gap > end:
                break
            row[col:col + len(word)] = word
            col += len(word) + gap
        if end >= 0:
            row[end:] = last
        return Text("step".ljust(self.label_width) + "".join(row),
                    style="dim") + Text("\n")

    # ---- keys ------------------------------------------------------------------------------------------
    def action_move(self, steps: int) -> None:
        self.step, self.note = min(max(self.step + steps, 0), self.series.steps), ""
        self.redraw()

    def action_jump(self, direction: int) -> None:
        """A column's worth of steps (at least ten)."""
        per_column = -(-(self.series.steps + 1) // self.width)
        self.action_move(direction * max(10, per_column))

    def action_to_end(self, last: bool) -> None:
        self.action_move(self.series.steps if last else -self.series.steps)

    def action_series(self, delta: int) -> None:
        names = self.charts[self.chart][1]
        self.chosen = (self.chosen + delta) % len(names)
        self.redraw()

    def action_chart(self, delta: int) -> None:
        self.chart = (self.chart + delta) % len(self.charts)
        self.chosen = 0
        self.redraw()

    def action_changes(self) -> None:
        name = self.charts[self.chart][1][self.chosen]
        found = self.series.changes_at(name, self.step)
        if found is None:
            self.note = f"{name} does not change after step {self.step:,}"
        else:
            self.step, self.note = found, f"{name} changes at step {found:,}"
        self.redraw()

    def on_click(self, event: events.Click) -> None:
        """A point of a line (or of the markers' line) under the pointer: the cursor goes there."""
        offset = event.get_content_offset(self.query_one("#charts-text"))
        names = self.charts[self.chart][1]
        if offset is None or offset.x < self.label_width or not 1 <= offset.y <= len(names) + 1:
            return
        if offset.y <= len(names):
            self.chosen = offset.y - 1
        steps = self._points(names[self.chosen]).steps
        self.step, self.note = int(steps[min(offset.x - self.label_width, len(steps) - 1)]), ""
        self.redraw()

    def action_go(self) -> None:
        self.dismiss(self.step)


def _fmt(value: float) -> str:
    if np.isnan(value):
        return "–"
    return f"{value:.3f}" if value != int(value) else f"{int(value):,}"


def _value_width(values: np.ndarray) -> int:
    """The widest a series' value at the cursor can be written (``_fmt``)."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return 1
    widest = max(len(f"{int(finite.min()):,}"), len(f"{int(finite.max()):,}"))
    return widest + 4 if bool(np.any(finite != np.round(finite))) else widest  # ".123"
