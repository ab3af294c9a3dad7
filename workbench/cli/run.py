"""``urc run``: run scenario files headlessly, checking every step (or ``--until`` a
condition holds, or ``--against sglang``)."""

from __future__ import annotations

import contextlib
import os
import sys

from ..model.scenarios.scenario import ScenarioError
from .against import add_against_options, check_against_use
from .common import EXIT_CHECK_FAILED, EXIT_OK, FILE_HELP, STORAGE_DIR_HELP, check_storage_dir_use, load_all


def add_parser(command) -> None:
    run = command("run", "run scenario files headlessly and check every step",
                  "Run each scenario, checking invariants, fingerprints and expectations after every step.")
    run.add_argument("files", nargs="+", metavar="FILE", help=FILE_HELP)
    run.add_argument("--json", action="store_true",
                     help="print a JSON array on stdout, one object per file (JSON Lines with --states)")
    run.add_argument("--states", action="store_true",
                     help="with --json: add the state after every step, as what each step changed: the output "
                          "becomes JSON Lines (a run header, a line per step, an end line), every 256th step "
                          "holding the whole state; rebuild any step with the library's state_deltas_read.state_at")
    run.add_argument("--full-states", action="store_true",
                     help="with --json: the whole state in every step of the JSON array instead (large: each "
                          "step repeats the tree)")
    run.add_argument("--record", metavar="OUT.jsonl",
                     help="write a JSONL trace of the executed steps, one line per step as it runs (one FILE only)")
    run.add_argument("--kv-events", metavar="OUT.jsonl|ENDPOINT",
                     help="turn SGLang's KV events on and write them, one JSON line per event with its step and op, "
                          "checking after every step that a router replaying them sees what the cache holds "
                          "(one FILE only); a tcp://*:PORT or ipc://PATH endpoint publishes them instead, as SGLang's "
                          "ZmqEventPublisher does (one batch per step that has events; needs the kv-events extra)")
    run.add_argument("--kv-events-replay", metavar="ENDPOINT",
                     help="with --kv-events tcp://… or ipc://…: also answer replay requests there (SGLang's "
                          "replay_endpoint: a router fetches the batches it missed), the last 10,000 batches")
    run.add_argument("--kv-events-wait", type=int, default=0, metavar="N",
                     help="with --kv-events tcp://… or ipc://…: wait (up to 60 s) for N subscribers before the "
                          "first step, so none misses the first batches")
    run.add_argument("--kv-events-linger", type=float, default=0.0, metavar="SECONDS",
                     help="with --kv-events-replay: keep answering replay requests for SECONDS after the last step")
    run.add_argument("--store", metavar="RUN.urcdb",
                     help="keep the checked timeline in a file (SQLite), written as the steps run: a JSONL trace is "
                          "streamed, so memory stays flat whatever its length; open it again with urc tui RUN.urcdb "
                          "(one FILE only)")
    run.add_argument("--force", action="store_true",
                     help="let --record, --kv-events or --store overwrite an existing file (never an input)")
    run.add_argument("--full-checks", action="store_true",
                     help="run the full invariant sweep after every step (default: what the step touched, "
                          "and the whole tree every 256 steps and at the end)")
    run.add_argument("--until", action="append", default=[], metavar="COND",
                     help="stop at the first step where COND holds and print that step (exit 0; exit 1 when it never "
                          "holds); repeat for any of several. COND is space-separated terms that must all hold, e.g. "
                          "'event=cascade component=swa', 'violation', 'failed', 'node=7', 'swa_available<4', "
                          "'op=req_prefill req=r3' (the full list: the TUI's breakpoint editor, b)")
    run.add_argument("--storage-dir", metavar="DIR", help=STORAGE_DIR_HELP)
    add_against_options(run, run=True)


def run(args) -> int:
    check_against_use(args, {"--record": bool(args.record), "--kv-events": bool(args.kv_events),
                             "--states": args.states, "--full-states": args.full_states, "--until": bool(args.until),
                             "--full-checks": args.full_checks, "--force": args.force, "--store": bool(args.store)})
    check_storage_dir_use(args, args.files)
    if args.against:
        from .against import run_against

        return run_against(args, load_all(args.files))
    if args.record and len(args.files) != 1:
        raise ScenarioError("--record takes exactly one scenario file")
    for flag, on in (("--states", args.states), ("--full-states", args.full_states)):
        if on and not args.json:
            raise ScenarioError(f"{flag} only applies with --json")
    if args.states and args.full_states:
        raise ScenarioError("--states writes each step's changes, --full-states each whole state: choose one")
    if args.kv_events and len(args.files) != 1:
        raise ScenarioError("--kv-events takes exactly one scenario file")
    if args.force and not (args.record or args.kv_events or args.store):
        raise ScenarioError("--force only applies with --record, --kv-events or --store")
    outputs = [(flag, path) for flag, path in (("--record", args.record), ("--kv-events", _kv_file(args)),
                                                ("--store", args.store)) if path]
    for n, (flag, path) in enumerate(outputs):
        for other, other_path in outputs[n + 1:]:
            if os.path.abspath(path) == os.path.abspath(other_path):
                raise ScenarioError(f"{flag} and {other} name the same file")
    _check_kv_publish(args)
    if args.store:
        return _run_stored(args)
    if args.until and args.json:
        raise ScenarioError("--until prints the step it stops at as text: leave out --json")
    scenarios = load_all(args.files)
    if args.until:
        from ..model.debugging.breakpoints import ConditionError, parse_conditions

        try:
            args.conditions = [parse_conditions(args.until, s.config["components"], bool(s.config.get("hicache")))
                               for s in scenarios]
        except ConditionError as exc:
            raise ScenarioError(f"--until: {exc}") from None
    if args.record:
        from ..model.scenarios.outputs import check_output

        check_output(args.record, args.files, args.force, "--record")
    if _kv_file(args):
        from ..model.scenarios.outputs import check_output

        check_output(args.kv_events, args.files, args.force, "--kv-events")
    from ..render.report import make_console

    console = make_console(sys.stderr if args.json else sys.stdout)
    array = args.json and not args.states  # --states is JSON Lines, one run after another
    if array:
        sys.stdout.write("[\n")
    passed = True
    for n, scenario in enumerate(scenarios):
        if array and n:
            sys.stdout.write(",\n")
        conditions = args.conditions[n] if args.until else None
        with contextlib.ExitStack() as outputs:
            record, kv_events = _open_outputs(outputs, args)
            passed &= _run_one(scenario, args, console, record, conditions, kv_events)
    if array:
        sys.stdout.write("\n]\n")
    return EXIT_OK if passed else EXIT_CHECK_FAILED


def _open_outputs(outputs: contextlib.ExitStack, args):
    """The --record and --kv-events streams (None where not asked for), closed with ``outputs``."""
    from ..model.scenarios.outputs import open_output

    record = kv_events = None
    if args.record:
        record = outputs.enter_context(open_output(args.record, args.files, args.force, "--record", live=True))
    if _kv_file(args):
        kv_events = outputs.enter_context(open_output(args.kv_events, args.files, args.force, "--kv-events"))
    elif args.kv_events:
        from ..model.kv_wire.publish import open_publisher

        kv_events = outputs.enter_context(open_publisher(args.kv_events, args.kv_events_replay, args.kv_events_wait,
                                                         args.kv_events_linger))
    return record, kv_events


def _kv_file(args):
    """The --kv-events JSONL file (None when it names an endpoint or is not given)."""
    from ..model.kv_wire import is_endpoint

    return args.kv_events if args.kv_events and not is_endpoint(args.kv_events) else None


def _check_kv_publish(args) -> None:
    """The publishing options: an endpoint for --kv-events, the extra installed."""
    publishing = bool(args.kv_events) and not _kv_file(args)
    for flag, on in (("--kv-events-replay", bool(args.kv_events_replay)), ("--kv-events-wait", bool(args.kv_events_wait)),
                     ("--kv-events-linger", bool(args.kv_events_linger))):
        if on and not publishing:
            raise ScenarioError(f"{flag} only applies with --kv-events tcp://… or ipc://…")
    if args.kv_events_wait < 0 or args.kv_events_linger < 0:
        raise ScenarioError("--kv-events-wait and --kv-events-linger take a number from 0")
    if args.kv_events_linger and not args.kv_events_replay:
        raise ScenarioError("--kv-events-linger keeps the replay socket answering: give --kv-events-replay")
    if publishing:
        from ..model.kv_wire import check_endpoint, require

        require("--kv-events ENDPOINT")
        check_endpoint(args.kv_events, "--kv-events")
        if args.kv_events_replay:
            check_endpoint(args.kv_events_replay, "--kv-events-replay")


def _run_one(scenario, args, console, record, conditions=None, kv_events=None) -> bool:
    """Run one scenario, streaming its JSON and showing progress on a terminal; on
    Ctrl-C report what was checked so far, then stop. With ``conditions`` (--until)
    stop at the first step where one holds and print it; True when one did."""
    from ..model.debugging.breakpoints import describe_hit
    from ..model.timeline.search import any_holds
    from ..model.timeline.export import TimelineJsonWriter
    from ..model.timeline.runner import Runner, checked_loop
    from ..render.report import is_plain, print_run_report, progress, step_view

    runner = Runner(scenario, record=record, full_checks=args.full_checks, kv_events=kv_events)
    timeline = runner.timeline
    if not args.json:
        writer = None
    elif args.states:
        from ..model.timeline.state_deltas import StateDeltaWriter

        writer = StateDeltaWriter(sys.stdout, timeline)
    else:
        writer = TimelineJsonWriter(sys.stdout, timeline, args.full_states)
    if writer is not None:
        timeline.on_step(writer.step)
    try:
        with progress(len(scenario.steps), scenario.path) as advance, checked_loop():
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
            if not args.states:
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


def _run_stored(args) -> int:
    """``--store``: stream the file's steps through the runner into a store file."""
    from ..model.scenarios.outputs import check_output
    from ..model.timeline.stored import SUFFIX
    from ..model.timeline.store_run import run_to_store
    from ..render.report import make_console, print_run_report, progress

    if len(args.files) != 1:
        raise ScenarioError("--store takes exactly one scenario file")
    for flag, on in (("--json", args.json), ("--states", args.states), ("--full-states", args.full_states),
                     ("--until", bool(args.until))):
        if on:
            raise ScenarioError(f"--store keeps every step in the file: leave out {flag}")
    if not args.store.endswith(SUFFIX):
        raise ScenarioError(f"--store writes a {SUFFIX} file (got {args.store})")
    source = args.files[0]
    if source == "-":
        raise ScenarioError("--store reads a file (its steps are streamed): save standard input to a file first")
    check_output(args.store, args.files, args.force, "--store")
    for flag, path in (("--record", args.record), ("--kv-events", _kv_file(args))):
        if path:
            check_output(path, args.files, args.force, flag)
    console = make_console(sys.stdout)
    with contextlib.ExitStack() as outputs:
        record, kv_events = _open_outputs(outputs, args)
        replacing = os.path.lexists(args.store)  # check_output allowed it: --force
        bar = outputs.enter_context(progress(_count_steps(source), source))
        try:
            timeline = run_to_store(source, args.store, args.full_checks, record, kv_events, on_step=bar)
        except KeyboardInterrupt:
            console.print(f"interrupted: {args.store} " + ("left as it was (a store is replaced only by a run that "
                          "finishes)" if replacing else "keeps the steps checked so far"), markup=False, highlight=False)
            raise
    try:
        for notice in timeline.scenario.notices:
            console.print(f"note: {notice}", markup=False, highlight=False)
        print_run_report(timeline, console)
        size = os.path.getsize(args.store)
        console.print(f"stored {len(timeline):,} steps in {args.store} ({size / 1e6:,.1f} MB): "
                      f"urc tui {args.store}", markup=False, highlight=False)
        return EXIT_OK if timeline.passed else EXIT_CHECK_FAILED
    finally:
        timeline.close()


def _count_steps(path: str) -> int:
    """Step lines in a trace, counted fast (for the progress bar only); 0 when unknown."""
    if not path.endswith(".jsonl"):
        return 0
    lines = 0
    try:
        with open(path, "rb") as stream:
            while chunk := stream.read(1 << 22):
                lines += chunk.count(b"\n")
    except OSError:
        return 0
    return max(0, lines - 1)
