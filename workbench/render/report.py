"""Reports for ``urc run``, ``urc show`` and the tour walk-through (rich).

On a terminal: colour and panels. Piped or redirected: the same lines, plain and
unwrapped, so ``grep`` finds ``PASS path — name`` whole. A file's text (names, paths,
descriptions, ids) is shown ``printable`` and never as markup, so it cannot drive the
terminal.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from collections.abc import Iterable
from typing import Optional, TextIO

from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.panel import Panel
from rich.segment import Segment
from rich.text import Text

from cache.config.reference import config_line

from ..model.scenarios.errors import printable
from ..model.timeline.fmt import event_text, fields_text, plural, result_text, value_text
from ..model.scenarios.scenario import STDIN_NAME
from ..model.timeline.timeline import StepRecord, Timeline
from .tree_view import render_state

DETAILED_FAILURES = 10  # failing steps reported in full; later ones get one line each
PLAIN_WIDTH = 100_000  # "no wrapping" for rich when the output is not a terminal


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """rich exits 1 on a closed pipe; ``urc`` treats ``| head`` as a normal end."""
        raise BrokenPipeError

    def render(self, renderable, options: Optional[ConsoleOptions] = None) -> Iterable[Segment]:
        """Every segment's text ``printable``: file text a view did not escape is still
        shown escaped, never run by the terminal (rich's own control segments pass)."""
        for segment in super().render(renderable, options):
            yield segment if segment.control else Segment(printable(segment.text, lines=True), segment.style)


def make_console(stream: Optional[TextIO] = None) -> Console:
    stream = stream or sys.stdout
    if stream.isatty():
        return _Console(file=stream)
    return _Console(file=stream, width=PLAIN_WIDTH, soft_wrap=True, no_color=True, highlight=False, emoji=False)


def is_plain(console: Console) -> bool:
    return console.width >= PLAIN_WIDTH


def reflow(text: str) -> str:
    """Join hard-wrapped lines of a TOML string; keep blank-line paragraph breaks."""
    return "\n".join(" ".join(p.split()) for p in text.strip().split("\n\n"))


def step_title(record: StepRecord, path: str) -> str:
    step = record.step
    return f"step {step.index} ({printable(path)}:{step.line}) {printable(step.op)}({fields_text(step.fields)})"


def show_command(path: str, index: int) -> Optional[str]:
    return None if path == STDIN_NAME else printable(f"urc show {shlex.quote(path)} --step {index}")


def problems(record: StepRecord) -> list[str]:
    """What went wrong in a step, one line each."""
    lines = [f"{f.field}: expected {value_text(f.expected)}, got {value_text(f.actual)}" for f in record.failures]
    lines += [f"invariant {v.name}: {printable(v.message)}" for v in record.violations]
    return lines


@contextlib.contextmanager
def progress(total: int, label: str, stream: Optional[TextIO] = None, minimum: int = 200):
    """A progress bar on stderr for long runs, only on a terminal; yields ``advance(n=1)``."""
    stream = stream or sys.stderr
    if total < minimum or not stream.isatty():
        yield lambda n=1: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                   TimeRemainingColumn(), console=Console(file=stream), transient=True)
    with bar:
        task = bar.add_task(printable(label), total=total)  # a file's path
        yield lambda n=1: bar.advance(task, n)


def print_run_report(timeline: Timeline, console: Console, interrupted: bool = False) -> None:
    scenario = timeline.scenario
    steps = plural(len(timeline), "step")
    failing = timeline.failing()
    path, name = printable(scenario.path), printable(scenario.name)
    if interrupted:
        console.print(Text.assemble(("STOPPED", "bold yellow"), f" {path} — {name} (interrupted: "
                                    f"{steps} of {len(scenario.steps):,} checked, {len(failing):,} failed)"))
    elif not failing:
        console.print(Text.assemble(("PASS", "bold green"), f" {path} — {name} ({steps})"))
        return
    else:
        console.print(Text.assemble(("FAIL", "bold red"), f" {path} — {name} ({steps}, {len(failing):,} failed)"))
    console.print(Text(f"  config: {printable(config_line(scenario.config))}", style="dim"))
    for n, record in enumerate(failing):
        command = show_command(scenario.path, record.index)
        if n < DETAILED_FAILURES:
            console.print(Text("  " + step_title(record, scenario.path), style="bold"))
            for line in problems(record):
                console.print(Text("    " + line, style="red"))
            if command:
                console.print(Text(f"    inspect: {command}", style="dim"))
        else:
            first = (problems(record) or ["failed"])[0]
            where = f"step {record.index} ({path}:{record.step.line}) {printable(record.step.op)}"
            console.print(Text(f"  {where}: {first}" + (f"  [{command}]" if command else ""), style="red"))


def walk(timeline: Timeline, console: Console, upto: int | None = None) -> None:
    """Print each step's description, op, result, events and tree (the tour)."""
    scenario = timeline.scenario
    intro = Text(printable(reflow(scenario.description or scenario.name), lines=True))
    config, name = printable(config_line(scenario.config)), printable(scenario.name)
    if is_plain(console):
        console.print(Text(f"== {name} ({printable(scenario.path)})"))
        console.print(Text(f"config: {config}"))
        console.print(intro)
    else:
        console.print(Panel(intro, title=Text(name), subtitle=Text(config), subtitle_align="left"))
    for record in timeline.records[:upto]:
        console.print(step_view(record, scenario.path, plain=is_plain(console)))


def _request_lines(record: StepRecord) -> list[str]:
    """What the step did to each running request (the model's request diff)."""
    from ..model.timeline.request_diff import request_diff

    store_globals = record.store.globals
    if not 1 <= record.index < len(store_globals):
        return []
    before, after = store_globals[record.index - 1].requests, store_globals[record.index].requests
    if not before and not after:
        return []
    return request_diff(before, after, record.events).lines()


def _metric_line(record: StepRecord) -> str:
    """What the step added to the cache's running totals (cache/observe/metrics.py)."""
    from ..model.timeline.metric_rows import metric_changes

    store_globals = record.store.globals
    if not 1 <= record.index < len(store_globals):
        return ""
    return metric_changes(store_globals[record.index].metrics, store_globals[record.index - 1].metrics)


def step_view(record: StepRecord, path: str, plain: bool = False) -> RenderableType:
    """A step: its description, result or error, events, the tree after it and what failed."""
    parts: list[RenderableType] = []
    if record.step.description:
        parts.append(Text(printable(reflow(record.step.description), lines=True), style="italic"))
    if record.error:
        parts.append(Text(f"error: {printable(record.error)}", style="yellow"))
    elif record.result:
        parts.append(Text("result: " + result_text(record.result), style="bold"))
    for event in record.events:
        parts.append(Text("  " + event_text(event, record.index), style="dim"))
    for line in record.kv_events:
        parts.append(Text("  kv event: " + printable(line), style="cyan"))  # a store's lines are not checked
    for line in _request_lines(record):
        parts.append(Text("  request " + line, style="yellow"))
    parts.append(render_state(record.state))
    if line := _metric_line(record):
        parts.append(Text("metrics: " + line, style="cyan"))
    for line in problems(record):
        parts.append(Text(f"✗ {line}", style="bold red"))
    title = Text(step_title(record, path))
    if plain:
        return Group(Text(f"-- {title.plain}", style="bold"), *parts, Text(""))
    style = "green" if record.passed else "red"
    return Panel(Group(*parts), title=title, title_align="left", border_style=style)
