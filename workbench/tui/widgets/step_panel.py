"""The current step: where it is in the file, its description, op, and its result or
error."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from ...model.scenarios.errors import printable
from ...model.scenarios.scenario import Scenario
from ...model.timeline.step_view import StepView
from ...model.timeline.fmt import fields_text, result_text
from .panel import TextPanel


class StepPanel(TextPanel):
    def head(self, heading: str) -> None:
        """Title the panel (not the header: it would relayout every step); a ``Text``, so
        the scenario's name in it is never read as markup."""
        self.border_title = Text(heading)

    def opening(self, scenario: Scenario, chapter: int, chapters: int) -> None:
        """What a chapter says before its cache is built: its name and description
        (the tour's chapters teach there) and that the cache is on its way."""
        of = f" · chapter {chapter + 1}/{chapters}" if chapters > 1 else ""
        self.head(f"step 0/{len(scenario.steps):,}{of} · {printable(scenario.name)}")
        parts = _start(scenario) + [Text("building the cache (torch loads the first time)…", style="dim")]
        self.put(Group(*parts))

    def cannot_open(self, scenario: Scenario, error: str) -> None:
        """A chapter whose cache cannot be built: its text and why."""
        self.put(Group(*_start(scenario), Text(f"error: {printable(error)}", style="yellow")))

    def show(self, view: StepView) -> None:
        record = view.record
        scenario = view.scenario
        self.head(view.heading)
        parts = []
        if record is None:
            parts += _start(scenario)
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


def _start(scenario: Scenario) -> list[Text]:
    """Step 0's text: the scenario's name and description."""
    parts = [Text(f"{printable(scenario.name)}: the start", style="bold")]
    if scenario.description:
        parts.append(Text(printable(" ".join(scenario.description.split())), style="italic"))
    return parts
