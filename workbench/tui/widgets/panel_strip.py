"""The tab strip: the panels the terminal's size collapsed (fitting.py's rule), by
title; ``o`` zooms the next of them and a click zooms the one clicked. Hidden while
nothing is collapsed."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.widgets import Static


class PanelStrip(Static):
    COMPONENT_CLASSES = {"panel-strip--name"}

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.panels: list = []
        self.spans: list[tuple[int, int, object]] = []  # (first column, past the last, panel)

    def collapse(self, panels: list) -> None:
        self.panels = panels
        self.display = bool(panels)
        text, self.spans = Text("o opens: "), []
        style = self.get_component_rich_style("panel-strip--name", partial=True)
        for i, panel in enumerate(panels):
            if i:
                text.append(" · ")
            start = len(text)
            text.append(str(panel.border_title or panel.id), style=style)
            self.spans.append((start, len(text), panel))
        self.update(text)

    def on_click(self, event: events.Click) -> None:
        for start, end, panel in self.spans:
            if start <= event.x < end:
                self.app.open_panel(panel)
                return
