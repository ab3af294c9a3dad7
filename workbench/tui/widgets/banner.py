"""A banner naming each failed expectation and invariant of the current step."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ...model.scenarios.errors import printable
from ...model.timeline.step_view import StepView
from .panel import Panel


class Banner(Panel, Static):
    """Hidden while the step passed."""

    def show(self, view: StepView) -> None:
        record = view.record
        if record is None or record.passed:
            self.display = False
            return
        lines = [f"✗ {f}" for f in record.failures] + [f"✗ invariant {v.name}: {v.message}" for v in record.violations]
        self.update(Text("\n".join(map(printable, lines)), style="bold white"))  # names and ids from the file
        self.display = True
