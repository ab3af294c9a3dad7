"""``urc plot``: a whole run as charts (pools, hit rate, tree counts over every step)."""

from __future__ import annotations

import contextlib
import os

from ..model.scenarios.scenario import STDIN, ScenarioError
from .common import EXIT_OK, STORED_HELP, is_stored_run, load_chapters, say, scenario_of, step_in_range

FORMATS = ("svg", "png", "pdf")


def add_parser(command) -> None:
    plot = command("plot", "draw a whole run as charts (pools, hit rate, tree) for a report",
                   "Run FILE with every check and draw, over all its steps, each pool's available / evictable / "
                   "protected / held slots, the hit rate and the tree's counts, with the failing steps in red. "
                   "Long runs are cut to about 1,200 points per series (each point a bucket's lowest and highest "
                   "value), so a one-step spike still shows.")
    plot.add_argument("file", metavar="FILE", help=STORED_HELP)
    plot.add_argument("-o", "--output", metavar="OUT",
                      help="where to write: .svg, .png or .pdf (default: FILE's name with -plot.svg, here); "
                           "- writes SVG to stdout")
    plot.add_argument("--force", action="store_true", help="overwrite an existing output file (never an input)")
    plot.add_argument("--series", nargs="+", action="extend", metavar="NAME",
                      help="draw only these series or charts: full_available, full_unaccounted, hit_rate, nodes, … "
                           "or a whole chart (full, swa, full_host, hits, tree); default: every pool counter that "
                           "is ever non-zero, the hit rates and the tree's counts (it takes every word up to the next "
                           "option: put FILE before it)")
    plot.add_argument("--changes", action="append", default=[], metavar="NAME[@STEP]",
                      help="mark (and print) the first step after STEP (default 0) where series NAME leaves the "
                           "value it had at STEP, e.g. full_unaccounted: the step a slot leaked; repeatable")
    plot.add_argument("--window", type=int, default=0, metavar="W",
                      help="with --changes: leaving the range the series kept over the W steps up to STEP counts, "
                           "not leaving its one value (default 0)")
    plot.add_argument("--mark", action="append", default=[], metavar="COND",
                      help="mark the steps where a breakpoint condition holds (as urc run --until: 'event=cascade', "
                           "'swa_available<4', 'op=evict'); repeatable")


def run(args) -> int:
    if args.window < 0:
        raise ScenarioError("--window must be 0 or more")
    if args.window and not args.changes:
        raise ScenarioError("--window only applies with --changes")
    opened = load_chapters([args.file])[0]  # a .urcdb store: its steps already checked, its rows kept
    stored = is_stored_run(opened)
    scenario = scenario_of(opened)
    changes = [_change_option(text, scenario) for text in args.changes]
    conditions = _conditions(args.mark, scenario)
    stem = "stdin" if args.file == STDIN else os.path.splitext(os.path.basename(args.file))[0]
    output = args.output or f"{stem}-plot.svg"
    fmt = "svg" if output == "-" else os.path.splitext(output)[1].lower().lstrip(".")
    if fmt not in FORMATS:
        raise ScenarioError(f"-o {output}: write .svg, .png or .pdf (or - for SVG on stdout)")
    from ..model.scenarios.outputs import check_output, open_output

    check_output(output, [args.file], args.force, "-o")
    try:
        from ..render.plot import ChangeMark, draw_run, figure_bytes
    except ImportError as exc:
        raise ScenarioError(f"urc plot needs matplotlib ({exc}): pip install matplotlib") from None
    from ..model.timeline.series import RunSeries
    from ..render.report import progress

    if stored:
        runner, checked_loop = None, contextlib.nullcontext
    else:
        from ..model.timeline.runner import Runner, checked_loop

        runner = Runner(scenario)
    series = RunSeries(opened if stored else runner.timeline, conditions)  # names are known before a step runs
    try:
        names = series.select(args.series) if args.series else None
    except KeyError as exc:
        raise ScenarioError(f"--series: {exc.args[0]}") from None
    for name, _ in changes:
        if name not in series.info:
            raise ScenarioError(f"--changes: no series {name!r}; known: {', '.join(series.info)}")
    with progress(0 if stored else len(scenario.steps), scenario.path) as advance, checked_loop():
        while runner is not None and not runner.done:
            runner.step()
            advance()
    series.refresh()
    marks = []
    for name, since in changes:
        at = series.changes_at(name, since, args.window)
        marks.append(ChangeMark(name, since, at))
        values = series.values(name)
        say(f"{name} changes at step {at:,} ({_shown(values[at - 1])} -> {_shown(values[at])})" if at is not None
            else f"{name} does not change after step {since:,}")
    data = figure_bytes(draw_run(series, names, marks), fmt)
    with open_output(output, [args.file], args.force, "-o") as stream:
        if fmt == "svg":
            stream.write(data.decode("utf-8"))
        else:  # the binary formats go to the text stream's own file
            stream.flush()
            stream.buffer.write(data)
    if output == "-":
        return EXIT_OK
    first = series.first_failure
    say(f"wrote {output} ({series.steps:,} steps; "
        + (f"{series.failing_steps.size:,} failing, the first at step {first:,})" if first else "every check passed)"))
    return EXIT_OK


def _change_option(text: str, scenario) -> tuple[str, int]:
    name, _, step = text.partition("@")
    if not name:
        raise ScenarioError(f"--changes {text!r}: name a series, e.g. full_unaccounted or full_available@100")
    if not step:
        return name, 0
    try:
        index = int(step.replace(",", "").replace("_", ""))
    except ValueError:
        raise ScenarioError(f"--changes {text!r}: the step after @ must be an int") from None
    return name, step_in_range("--changes", index, scenario)


def _conditions(texts: list[str], scenario):
    if not texts:
        return []
    from ..model.debugging.breakpoints import ConditionError, parse_conditions

    try:
        return parse_conditions(texts, scenario.config["components"], bool(scenario.config.get("hicache")))
    except ConditionError as exc:
        raise ScenarioError(f"--mark: {exc}") from None


def _shown(value: float) -> str:
    if value != value:  # NaN
        return "none"
    return f"{int(value):,}" if float(value).is_integer() else f"{value:.3f}"
