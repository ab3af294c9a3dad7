"""Rich reports for ``urc run``, ``urc show`` and the tour walk-through."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .timeline import StepRecord, Timeline
from .tree_view import render_state


def reflow(text: str) -> str:
    """Join hard-wrapped lines of a TOML string; keep blank-line paragraph breaks."""
    return "\n".join(" ".join(p.split()) for p in text.strip().split("\n\n"))


def step_title(record: StepRecord, path: str) -> str:
    step = record.step
    args = ", ".join(f"{k}={v}" for k, v in step.fields.items())
    return f"step {step.index} ({path}:{step.line}) {step.op}({args})"


def print_run_report(timeline: Timeline, console: Console) -> None:
    scenario = timeline.scenario
    if timeline.passed:
        console.print(f"[bold green]PASS[/] {escape(scenario.path)} — {escape(scenario.name)} ({len(timeline)} steps)")
        return
    record = timeline.first_failure
    console.print(f"[bold red]FAIL[/] {escape(scenario.path)} — {escape(scenario.name)}")
    console.print(Text(step_title(record, scenario.path), style="bold"))
    if record.failures:
        table = Table("field", "expected", "actual", box=None, padding=(0, 2))
        for f in record.failures:
            table.add_row(f.field, repr(f.expected), repr(f.actual))
        console.print(table)
    for v in record.violations:
        console.print(Text(f"  invariant {v.name}: {v.message}", style="red"))
    others = sum(1 for r in timeline.records if not r.passed) - 1
    if others:
        console.print(f"  [dim]({others} later step(s) failed too)[/]")


def walk(timeline: Timeline, console: Console, upto: int | None = None) -> None:
    """Print each step's description, op, result, events and tree (the tour)."""
    scenario = timeline.scenario
    console.print(Panel(Text(reflow(scenario.description or scenario.name)), title=escape(scenario.name)))
    for record in timeline.records[:upto]:
        console.print(step_panel(record, scenario.path))


def step_panel(record: StepRecord, path: str) -> Panel:
    parts = []
    if record.step.description:
        parts.append(Text(reflow(record.step.description), style="italic"))
    if record.error:
        parts.append(Text(f"error: {record.error}", style="yellow"))
    elif record.result:
        parts.append(Text("result: " + ", ".join(f"{k}={v}" for k, v in record.result.items()), style="bold"))
    for event in record.events:
        parts.append(Text("  " + event.describe(), style="dim"))
    parts.append(render_state(record.snapshot))
    for failure in record.failures:
        parts.append(Text(f"✗ {failure}", style="bold red"))
    for v in record.violations:
        parts.append(Text(f"✗ invariant {v}", style="bold red"))
    style = "green" if record.passed else "red"
    return Panel(Group(*parts), title=Text(step_title(record, path)), title_align="left", border_style=style)
