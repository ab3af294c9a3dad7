"""A banner saying where the chapter's scenario first diverged from SGLang's own
cache (``urc tui --against sglang``): from that step on, with both sides."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ...model.scenarios.errors import printable
from ...model.timeline.step_view import StepView
from .panel import Panel


class DivergenceBanner(Panel, Static):
    """Hidden before the divergence, and in chapters that agree."""

    def show(self, view: StepView) -> None:
        at, step = view.divergence, view.step
        if at is None or step < at[0]:
            self.display = False
            return
        where = "this step" if step == at[0] else f"step {at[0]}"
        self.update(Text(f"≠ SGLang diverges at {where}: {printable(at[1])}", style="bold"))
        self.display = True
