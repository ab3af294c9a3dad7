"""The cache's running totals at this step (hits and misses by tier, per component
evictions and tier traffic, storage), each with what this step added."""

from __future__ import annotations

from rich.text import Text

from ...model.timeline.metric_rows import metric_rows
from ...model.timeline.step_view import StepView
from .panel import TextPanel


class MetricsPanel(TextPanel):
    def show(self, view: StepView) -> None:
        text = Text()
        for group, entries in metric_rows(view.state.metrics, view.previous_state.metrics):
            if text:
                text.append("\n")
            text.append(f"{group:<8}", style="bold")
            for i, entry in enumerate(entries):
                text.append(" · " if i else "")
                text.append(f"{entry.label} {entry.value:,}")
                if entry.delta:
                    text.append(f" {entry.delta:+,}", style="yellow")
        self.put(text if text else Text("nothing counted yet", style="dim"))
