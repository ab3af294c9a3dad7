"""The current step: where it is in the file, its description, op, and its result or
error."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from ...model.scenarios.errors import printable
from ...model.timeline.step_view import StepView
from ...model.timeline.fmt import fields_text, result_text
from .panel import TextPanel


class StepPanel(TextPanel):
    def head(self, heading: str) -> None:
        """Title the panel (not the header: it would relayout every step); a ``Text``, so
        the scenario's name in it is never read as markup."""
        self.border_title = Text(heading)

    def show(self, view: StepView) -> None:
        record = view.record
        scenario = view.scenario
        self.head(view.heading)
        parts = []
        if record is None:
            parts.append(Text(f"{printable(scenario.name)}: the start", style="bold"))
            if scenario.description:
                parts.append(Text(printable(" ".join(scenario.description.split())), style="italic"))
        else:
            step = record.step
            where = f"{printable(scenario.path)}:{step.line}" if step.line else "typed live"
            parts.append(Text(f"step {step.index} ({where})  {printable(step.op)}({fields_text(step.fields)})", style="bold"))
            if step.description:
                parts.append(Text(printable(" ".join(step.description.split())), style="italic"))
            if record.error:
                parts.append(Text(f"error: {printable(record.error)}", style="yellow"))
            elif record.result:
                parts.append(Text("result: " + result_text(record.result)))
            for line in record.kv_events:  # what a router was told (enable_kv_cache_events)
                parts.append(Text("kv event: " + printable(line), style="cyan"))
        self.put(Group(*parts))  # relaid out, so a long result scrolls instead of being cut
