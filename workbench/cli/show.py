"""``urc show``: print the tree after one step of a scenario, or (``--walk``) every step."""

from __future__ import annotations

from ..model.scenarios.scenario import ScenarioError
from .common import EXIT_OK, STORED_HELP, load_chapters, scenario_of, step_in_range, timeline_of, walk


def add_parser(command) -> None:
    show = command("show", "print the tree after a step of a scenario",
                   "Print the step's op, result, events and the tree after it; --walk prints every step.")
    show.add_argument("files", nargs="+", metavar="FILE", help=STORED_HELP + "; several only with --walk")
    show.add_argument("--step", type=int, default=None, metavar="N",
                      help="the step to show (default: the last; 0: the empty start)")
    show.add_argument("--walk", action="store_true", help="print every step of every FILE in turn: the guided tour")


def run(args) -> int:
    if len(args.files) > 1 and not args.walk:
        raise ScenarioError("several files only with --walk")
    if args.walk and args.step is not None:
        raise ScenarioError("--step and --walk do not go together")
    scenarios = load_chapters(args.files)  # a .urcdb store is read, not run
    from ..render.report import make_console, step_view
    from ..render.tree_view import render_state

    console = make_console()
    if args.walk:
        return walk(scenarios, console)
    scenario = scenario_of(scenarios[0])
    n = step_in_range("--step", len(scenario.steps) if args.step is None else args.step, scenario)
    timeline = timeline_of(scenarios[0])
    from cache.config.reference import config_line
    from rich.text import Text

    console.print(Text(f"config: {config_line(scenario.config)}", style="dim"))
    if n == 0:
        console.print(render_state(timeline.initial))
    else:
        from ..render.report import is_plain

        console.print(step_view(timeline.records[n - 1], scenario.path, plain=is_plain(console)))
    return EXIT_OK
