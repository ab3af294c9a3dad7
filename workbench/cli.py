"""``urc``: the workbench's command line.

One error path for every command: an expected failure is one line on stderr and an
exit code (see ``EXIT_CODES``); a closed pipe ends quietly; anything unexpected is one
line that points at ``--debug``. Scenario files are checked before torch is imported,
so a typo is reported at once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional

from .cli_bridge import add_against_options, check_against_use
from .model.scenario import STDIN, ScenarioError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_CODES = """\
exit codes:
  0    every check passed
  1    a check failed: an expectation, an invariant or a KV fingerprint (urc fuzz: it found a failure)
  2    bad input: an invalid scenario file, option or output path
  3    an internal error in urc (run again with --debug for the traceback)
  130  interrupted (Ctrl-C)"""


def version() -> str:
    try:
        from importlib.metadata import version as dist_version

        return dist_version("unified-cache-workbench")
    except Exception:  # running from a source tree that was never installed
        return "unknown"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors: one line, exit 2, like invalid files
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    form = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog="urc", description="Unified Radix Cache workbench: run, inspect and time cache scenarios.",
        epilog=EXIT_CODES, formatter_class=form,
    )
    parser.add_argument("--version", action="version", version=f"urc {version()}")
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an internal error")
    debug = _Parser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")

    def command(name: str, help: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=description, epilog=EXIT_CODES, formatter_class=form,
                              parents=[debug])

    file_help = "a .toml scenario or .jsonl trace; - reads one from standard input"
    run = command("run", "run scenario files headlessly and check every step",
                  "Run each scenario, checking invariants, fingerprints and expectations after every step.")
    run.add_argument("files", nargs="+", metavar="FILE", help=file_help)
    run.add_argument("--json", action="store_true", help="print a JSON array on stdout, one object per file")
    run.add_argument("--states", action="store_true", help="with --json: add the state after every step")
    run.add_argument("--record", metavar="OUT.jsonl",
                     help="write a JSONL trace of the executed steps, one line per step as it runs (one FILE only)")
    run.add_argument("--force", action="store_true", help="let --record overwrite an existing file (never an input)")
    run.add_argument("--full-checks", action="store_true",
                     help="run the full invariant sweep after every step (default: what the step touched, "
                          "and the whole tree every 256 steps and at the end)")
    run.add_argument("--until", action="append", default=[], metavar="COND",
                     help="stop at the first step where COND holds and print that step (exit 0; exit 1 when it never "
                          "holds); repeat for any of several. COND is space-separated terms that must all hold, e.g. "
                          "'event=cascade component=swa', 'violation', 'failed', 'node=7', 'swa_available<4', "
                          "'op=req_prefill req=r3' (the full list: the TUI's breakpoint editor, b)")
    add_against_options(run, run=True)

    diff = command("diff", "what changed between two steps of a scenario",
                   "Nodes added, removed and split, values and tombstones, lock deltas, LRU moves and pool deltas "
                   "from the state after step M to the state after step N.")
    diff.add_argument("file", metavar="FILE", help=file_help)
    diff.add_argument("--from", dest="start", type=int, default=None, metavar="M",
                      help="the earlier step (default: N - 1; 0: the empty start)")
    diff.add_argument("--to", dest="end", type=int, default=None, metavar="N", help="the later step (default: the last)")
    diff.add_argument("--json", action="store_true", help="print the diff as JSON")

    why = command("why", "explain how a node came to be as it is, or why a match stopped where it did",
                  "The chain of causes, in sentences built from the events: when each component's data on the node "
                  "was set, tombstoned, locked or evicted, by which step, op and request; without --node, why the "
                  "step's match stopped where it did (each component's verdict).")
    why.add_argument("file", metavar="FILE", help=file_help)
    why.add_argument("--step", type=int, default=None, metavar="N", help="the state after step N (default: the last)")
    why.add_argument("--node", type=int, default=None, metavar="ID", help="the node to explain (see urc show)")

    show = command("show", "print the tree after a step of a scenario",
                   "Print the step's op, result, events and the tree after it; --walk prints every step.")
    show.add_argument("files", nargs="+", metavar="FILE", help=file_help + "; several only with --walk")
    show.add_argument("--step", type=int, default=None, metavar="N",
                      help="the step to show (default: the last; 0: the empty start)")
    show.add_argument("--walk", action="store_true", help="print every step of every FILE in turn: the guided tour")

    svg = command("svg", "draw the tree after a step as SVG (or DOT)",
                  "Draw the state after step N as an SVG picture (Graphviz dot), or its DOT text; with --diff M the "
                  "changes since step M are highlighted and evicted nodes drawn as ghosts.")
    svg.add_argument("file", metavar="FILE", help=file_help)
    svg.add_argument("--step", type=int, default=None, metavar="N", help="the state after step N (default: the last)")
    svg.add_argument("--diff", type=int, default=None, metavar="M", help="highlight what changed since step M")
    svg.add_argument("-o", "--output", metavar="OUT",
                     help="where to write (default: FILE's name with -stepN.svg or .dot, here); - writes to stdout")
    svg.add_argument("--dot", action="store_true", help="write DOT text instead of SVG (no Graphviz needed)")
    svg.add_argument("--max-nodes", type=int, default=500, metavar="K",
                     help="draw at most K nodes; the rest are folded into placeholders that say what they hold "
                          "(default 500)")
    svg.add_argument("--force", action="store_true", help="overwrite an existing output file (never an input)")

    tui = command("tui", "open the workbench: step through scenarios and watch the cache change",
                  "Open the Textual workbench on the given scenarios or traces (each a chapter), or on the bundled tour. "
                  "When stdout is not a terminal it prints the walk-through instead.")
    tui.add_argument("files", nargs="*", metavar="FILE", help=file_help + "; none: the bundled tour")
    tui.add_argument("--keymap", metavar="KEYMAP.toml",
                     help="rebind keys: binding_id = \"key\" per line (ids are listed in the help screen, f1)")
    tui.add_argument("--follow", metavar="TRACE.jsonl",
                     help="tail a JSONL trace while it is written (urc run --record, a fuzzer, a live recorder): "
                          "its steps are added as they arrive; waits for the file and its header line")
    add_against_options(tui)

    from .cli_fuzz import add_parser as add_fuzz

    add_fuzz(command)

    listing = command("ops", "list the scenario ops: syntax, results and needs",
                      "Every op a scenario, a live command or the fuzzer can use, from the op registry "
                      "(workbench/model/ops): one line each, or the README's reference table with --markdown.")
    listing.add_argument("--markdown", action="store_true", help="print the README's op reference table")

    command("demo", "run a small built-in sequence and print the tree after each step",
            "A tiny built-in sequence on the Full component; needs no file.")

    from .cli_bench import add_parser as add_bench

    add_bench(command)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    name = f"urc {args.command}"
    try:
        return COMMANDS[args.command](args)
    except ScenarioError as exc:
        _say(f"{name}: {exc}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _say(f"{name}: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (``| head``): nothing more to say
        _silence_stdout()
        return EXIT_OK
    except Exception as exc:
        if getattr(args, "debug", False):
            raise
        first = (str(exc).splitlines() or [""])[0][:300]
        _say(f"{name}: internal error: {type(exc).__name__}: {first} (run again with --debug for the traceback)")
        return EXIT_INTERNAL


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except (BrokenPipeError, OSError):
        pass


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _load_all(files: list[str]):
    """Load and check every file (and its config) before running any: no torch yet."""
    from .model.scenario import cache_config, load_scenario

    if files.count(STDIN) > 1:
        raise ScenarioError("standard input (-) can be read only once")
    scenarios = [load_scenario(path) for path in files]
    for scenario in scenarios:
        cache_config(scenario)
        for notice in scenario.notices:
            _say(f"note: {notice}")
    return scenarios


def _run(args) -> int:
    check_against_use(args, {"--record": bool(args.record), "--states": args.states, "--until": bool(args.until),
                             "--full-checks": args.full_checks, "--force": args.force})
    if args.against:
        from .cli_bridge import run_against

        return run_against(args, _load_all(args.files))
    if args.record and len(args.files) != 1:
        raise ScenarioError("--record takes exactly one scenario file")
    if args.states and not args.json:
        raise ScenarioError("--states only applies with --json")
    if args.force and not args.record:
        raise ScenarioError("--force only applies with --record")
    if args.until and args.json:
        raise ScenarioError("--until prints the step it stops at as text: leave out --json")
    scenarios = _load_all(args.files)
    if args.until:
        from .model.breakpoints import ConditionError, parse_conditions

        try:
            args.conditions = [parse_conditions(args.until, s.config["components"]) for s in scenarios]
        except ConditionError as exc:
            raise ScenarioError(f"--until: {exc}") from None
    if args.record:
        from .model.outputs import check_output

        check_output(args.record, args.files, args.force, "--record")
    from .render.report import make_console

    console = make_console(sys.stderr if args.json else sys.stdout)
    if args.json:
        sys.stdout.write("[\n")
    passed = True
    for n, scenario in enumerate(scenarios):
        if args.json and n:
            sys.stdout.write(",\n")
        conditions = args.conditions[n] if args.until else None
        if args.record:
            from .model.outputs import open_output

            with open_output(args.record, args.files, args.force, "--record", live=True) as stream:
                passed &= _run_one(scenario, args, console, stream, conditions)
        else:
            passed &= _run_one(scenario, args, console, None, conditions)
    if args.json:
        sys.stdout.write("\n]\n")
    return EXIT_OK if passed else EXIT_CHECK_FAILED


def _run_one(scenario, args, console, record, conditions=None) -> bool:
    """Run one scenario, streaming its JSON and showing progress on a terminal; on
    Ctrl-C report what was checked so far, then stop. With ``conditions`` (--until)
    stop at the first step where one holds and print it; True when one did."""
    from .model.breakpoints import any_holds, describe_hit
    from .model.export import TimelineJsonWriter
    from .model.runner import Runner
    from .render.report import is_plain, print_run_report, progress, step_view

    runner = Runner(scenario, record=record, full_checks=args.full_checks)
    timeline = runner.timeline
    writer = TimelineJsonWriter(sys.stdout, timeline, args.states) if args.json else None
    if writer is not None:
        timeline.on_step(writer.step)
    try:
        with progress(len(scenario.steps), scenario.path) as advance:
            while not runner.done:
                step = runner.step()
                advance()
                hit = any_holds(timeline, conditions, step.index) if conditions else None
                if hit is not None:
                    console.print(f"stopped at {describe_hit(step, hit)}", markup=False, highlight=False)
                    console.print(step_view(step, scenario.path, plain=is_plain(console)))
                    return True
    except KeyboardInterrupt:
        if writer is not None:
            writer.close(interrupted=True)
            sys.stdout.write("\n]\n")
        print_run_report(timeline, console, interrupted=True)
        raise
    if writer is not None:
        writer.close()
    elif conditions:
        console.print(f"{scenario.path}: no step matched --until ({len(timeline):,} steps run)", markup=False,
                      highlight=False)
        return False
    else:
        print_run_report(timeline, console)
    return timeline.passed


def _show(args) -> int:
    if len(args.files) > 1 and not args.walk:
        raise ScenarioError("several files only with --walk")
    if args.walk and args.step is not None:
        raise ScenarioError("--step and --walk do not go together")
    scenarios = _load_all(args.files)
    from .model.runner import run_scenario
    from .render.report import make_console, step_view
    from .render.tree_view import render_state

    console = make_console()
    if args.walk:
        return _walk(scenarios, console)
    scenario = scenarios[0]
    n = _step_in_range("--step", len(scenario.steps) if args.step is None else args.step, scenario)
    timeline = run_scenario(scenario)
    if n == 0:
        console.print(render_state(timeline.initial))
    else:
        from .render.report import is_plain

        console.print(step_view(timeline.records[n - 1], scenario.path, plain=is_plain(console)))
    return EXIT_OK


def _walk(scenarios, console) -> int:
    """Print every step of every scenario (the tour's walk-through)."""
    from .model.runner import run_scenario
    from .render.report import walk

    timelines = [run_scenario(s) for s in scenarios]
    for timeline in timelines:
        walk(timeline, console)
    return EXIT_OK if all(t.passed for t in timelines) else EXIT_CHECK_FAILED


def _step_in_range(option: str, step: int, scenario) -> int:
    total = len(scenario.steps)
    if not 0 <= step <= total:
        raise ScenarioError(f"{option} must be between 0 and {total} (the scenario has {total} steps)", scenario.path)
    return step


def _svg(args) -> int:
    if args.max_nodes < 1:
        raise ScenarioError("--max-nodes must be at least 1")
    scenario = _load_all([args.file])[0]
    step = _step_in_range("--step", len(scenario.steps) if args.step is None else args.step, scenario)
    if args.diff is not None:
        _step_in_range("--diff", args.diff, scenario)
    stem = "stdin" if args.file == STDIN else os.path.splitext(os.path.basename(args.file))[0]
    output = args.output or f"{stem}-step{step}.{'dot' if args.dot else 'svg'}"
    from .model.outputs import check_output, open_output

    check_output(output, [args.file], args.force, "-o")
    from .model.runner import run_scenario
    from .render.dot import render_svg
    from .render.picture import picture

    timeline = run_scenario(scenario)
    dot = picture(timeline, step, args.diff, args.max_nodes)
    if args.dot:
        text = dot.source
    else:
        import graphviz

        try:
            text = render_svg(dot)
        except graphviz.ExecutableNotFound:
            fallback = output[:-4] + ".dot" if output.endswith(".svg") else output + ".dot"
            if output != "-":
                with open_output(fallback, [args.file], args.force, "-o") as stream:
                    stream.write(dot.source)
            raise ScenarioError(f"Graphviz's 'dot' is not installed: wrote the DOT text to {fallback} instead; "
                                "install Graphviz (Debian: apt-get install graphviz) to render SVG") from None
    with open_output(output, [args.file], args.force, "-o") as stream:
        stream.write(text)
    if output != "-":
        _say(f"wrote {output}")
    return EXIT_OK


def _diff(args) -> int:
    scenario = _load_all([args.file])[0]
    end = _step_in_range("--to", len(scenario.steps) if args.end is None else args.end, scenario)
    start = _step_in_range("--from", max(0, end - 1) if args.start is None else args.start, scenario)
    from .model.diff import diff_json, diff_text
    from .model.runner import run_scenario

    timeline = run_scenario(scenario)
    diff = timeline.diff(start, end)
    if args.json:
        print(json.dumps(diff_json(diff), indent=1))
    else:
        print(f"{scenario.path}: from step {start} to step {end}")
        print("\n".join(diff_text(diff)) or "  (no change)")
    return EXIT_OK


def _why(args) -> int:
    scenario = _load_all([args.file])[0]
    step = _step_in_range("--step", len(scenario.steps) if args.step is None else args.step, scenario)
    from .model.runner import run_scenario
    from .model.why import why_match, why_node

    timeline = run_scenario(scenario)
    try:
        answer = why_match(timeline, step) if args.node is None else why_node(timeline, step, args.node)
    except ValueError as exc:
        raise ScenarioError(str(exc), scenario.path) from None
    print(answer.text())
    return EXIT_OK


TOUR = ("tour.toml", "tour_swa.toml", "tour_mamba.toml", "tour_sidecar.toml", "tour_hicache.toml",
        "tour_hicache_hybrid.toml")


def _tui(args) -> int:
    from pathlib import Path

    check_against_use(args, {"--follow": bool(args.follow)})

    follower = None
    if args.follow:
        if args.files:
            raise ScenarioError("--follow opens one trace: leave out the other files")
        follower, scenarios = _start_following(args.follow)
        files = [args.follow]
    else:
        files = args.files or [str(Path(__file__).resolve().parent.parent / "scenarios" / name) for name in TOUR]
        scenarios = _load_all(files)
    keymap = None
    if args.keymap:
        from .tui.bindings import KeymapError, load_keymap

        try:
            keymap = load_keymap(Path(args.keymap))
        except KeymapError as exc:
            raise ScenarioError(str(exc)) from None
    diverged = {}
    if args.against:
        from .cli_bridge import divergences

        diverged = divergences(args, scenarios)
    if not sys.stdout.isatty():
        from .render.report import make_console

        console = make_console()
        code = _walk(scenarios, console)
        console.print("(stdout is not a terminal: this is the walk-through; run `urc tui` in a terminal for the workbench)")
        return code
    from .tui.app import WorkbenchApp

    WorkbenchApp(scenarios, keymap, follower=follower, divergences=diverged).run()
    return EXIT_OK


def _start_following(path: str):
    """Open a trace to follow: wait (saying so once) for the file and its header line."""
    import time

    from .model.follow import TraceFollower
    from .model.scenario import cache_config

    if path == STDIN or not path.endswith(".jsonl"):
        raise ScenarioError("--follow reads a .jsonl trace file", path)
    follower = TraceFollower(path)
    said = None
    while (scenario := follower.start()) is None:
        if follower.waiting != said:
            said = follower.waiting
            _say(f"{said} (Ctrl-C stops)")
        time.sleep(0.2)
    cache_config(scenario)
    for notice in scenario.notices:
        _say(f"note: {notice}")
    return follower, [scenario]


def _demo(args) -> int:
    from .demo import run_demo
    from .render.report import make_console

    return run_demo(make_console())


def _bench(args) -> int:
    from .cli_bench import run

    return run(args)


def _fuzz(args) -> int:
    from .cli_fuzz import run

    return run(args)


def _ops(args) -> int:
    from .model import ops

    if args.markdown:
        print(ops.reference_table())
        return 0
    for spec in ops.all_ops():
        needs = f"  (needs {', '.join(spec.needs)})" if spec.needs else ""
        print(f"{spec.usage()}\n    {spec.summary}{needs}")
    return 0


COMMANDS = {"run": _run, "show": _show, "diff": _diff, "why": _why, "svg": _svg, "tui": _tui, "fuzz": _fuzz,
            "demo": _demo, "bench": _bench, "ops": _ops}

if __name__ == "__main__":
    sys.exit(main())
