"""``urc tui``: open the Textual workbench on scenarios, a followed trace or the bundled
tour; the walk-through instead when stdout is not a terminal."""

from __future__ import annotations

import sys

from ..model.scenarios.bundled import tour_files
from ..model.scenarios.scenario import STDIN, ScenarioError
from .against import add_against_options, check_against_use
from .common import (EXIT_INTERNAL, EXIT_OK, STORAGE_DIR_HELP, STORED_HELP, check_storage_dir_use, is_stored_run, load_chapters,
                     say, walk)



def add_parser(command) -> None:
    tui = command("tui", "open the workbench: step through scenarios and watch the cache change",
                  "Open the Textual workbench on the given scenarios or traces (each a chapter), or on the bundled tour. "
                  "When stdout is not a terminal it prints the walk-through instead.")
    tui.add_argument("files", nargs="*", metavar="FILE", help=STORED_HELP + "; or a bundled scenario's name "
                     "(tour, bugs/NAME); none: the whole bundled tour")
    tui.add_argument("--keymap", metavar="KEYMAP.toml",
                     help="rebind keys: binding_id = \"key\" per line (ids are listed in the help screen, f1)")
    tui.add_argument("--follow", metavar="TRACE.jsonl",
                     help="tail a JSONL trace while it is written (urc run --record, a fuzzer, a live recorder): "
                          "its steps are added as they arrive; waits for the file and its header line")
    tui.add_argument("--listen", metavar="ENDPOINT",
                     help="watch a live server's cache through its KV events (as urc listen): the blocks per medium, "
                          "each batch's changes and the consumer's checks, updated as batches arrive; or a .urcdb file "
                          "urc listen --store wrote")
    tui.add_argument("--replay", metavar="ENDPOINT", help="with --listen: the server's replay endpoint")
    tui.add_argument("--storage-dir", metavar="DIR", help=STORAGE_DIR_HELP)
    add_against_options(tui)


def run(args) -> int:
    from pathlib import Path

    check_against_use(args, {"--follow": bool(args.follow), "--listen": bool(args.listen)})
    if args.listen or args.replay:
        return _listen(args)
    check_storage_dir_use(args, [args.follow] if args.follow else args.files)

    keymap = None
    if args.keymap:
        from ..tui.bindings import KeymapError, load_keymap

        try:
            keymap = load_keymap(Path(args.keymap))
        except KeymapError as exc:
            raise ScenarioError(str(exc)) from None
    follower = None
    if args.follow:
        if args.files:
            raise ScenarioError("--follow opens one trace: leave out the other files")
        follower, scenarios = _start_following(args.follow)
        files = [args.follow]
    else:
        files = args.files or tour_files()
        scenarios = load_chapters(files)
    stored = [s for s in scenarios if is_stored_run(s)]
    diverged = {}
    if args.against and stored:
        raise ScenarioError("--against runs the scenario beside SGLang: give the trace, not its store", stored[0].path)
    if args.against:
        from .against import divergences

        diverged = divergences(args, scenarios)
    if not sys.stdout.isatty():
        from ..render.report import make_console

        console = make_console()
        if stored:  # a stored run can be millions of steps: its report, not a walk-through
            from ..render.report import print_run_report

            for timeline in stored:
                print_run_report(timeline, console)
            console.print("(stdout is not a terminal: run `urc tui` in a terminal to step through a stored run)")
            return EXIT_OK if all(t.passed for t in stored) else 1
        code = walk(scenarios, console)
        console.print("(stdout is not a terminal: this is the walk-through; run `urc tui` in a terminal for the workbench)")
        return code
    from ..tui.app import WorkbenchApp

    app = WorkbenchApp(scenarios, keymap, follower=follower, divergences=diverged)
    app.run()
    if app.input_error is not None:  # a chapter's cache could not be built (shown in the workbench too)
        raise app.input_error
    return EXIT_OK if not app.return_code else EXIT_INTERNAL  # it ended on an error of its own


def _listen(args) -> int:
    """``--listen``: the live view of a server's KV events, or a stored listen run."""
    if not args.listen:
        raise ScenarioError("--replay only applies with --listen")
    if args.files or args.follow or args.keymap or args.storage_dir:
        raise ScenarioError("--listen shows one stream: leave out the files, --follow, --keymap and --storage-dir")
    from ..model.kv_wire import is_endpoint, require

    require("urc tui --listen")
    from ..model.kv_wire.live import LiveModel

    if is_endpoint(args.listen):
        if not sys.stdout.isatty():
            raise ScenarioError("--listen shows a live stream in a terminal: use urc listen ENDPOINT here")
        from ..model.kv_wire.publish import open_listener
        from ..model.kv_wire.session import ListenSession

        session = ListenSession(open_listener(args.listen, args.replay, "", "urc tui --listen"))
        model = LiveModel(session.view, args.listen, session)
    else:
        if args.replay:
            raise ScenarioError("--replay applies to a live endpoint, not a stored listen run")
        from ..model.kv_wire.store import replay_store

        view, endpoint = replay_store(args.listen)
        model = LiveModel(view, f"{args.listen} (from {endpoint})")
        if not sys.stdout.isatty():
            for line in model.counts_lines() + [line for _, _, line in model.batch_lines()[-20:]]:
                print(line)
            return EXIT_OK if not view.violations else 1
    from ..tui.listen_app import ListenApp

    ListenApp(model).run()
    return EXIT_OK


def _start_following(path: str):
    """Open a trace to follow: wait (saying so once) for the file and its header line."""
    import time
    from pathlib import Path

    from ..model.scenarios.errors import shown_name
    from ..model.timeline.follow import TraceFollower
    from ..model.scenarios.scenario import cache_config

    if path == STDIN or not path.endswith(".jsonl"):
        raise ScenarioError("--follow reads a .jsonl trace file", path)
    folder = Path(path).parent
    if not folder.is_dir():  # nothing will ever appear there: say so instead of waiting
        raise ScenarioError(f"--follow: directory {shown_name(str(folder))} does not exist", path)
    follower = TraceFollower(path)
    said = None
    while (scenario := follower.start()) is None:
        if follower.waiting != said:
            said = follower.waiting
            say(f"{said} (Ctrl-C stops)")
        time.sleep(0.2)
    cache_config(scenario)
    for notice in scenario.notices:
        say(f"note: {notice}")
    return follower, [scenario]
