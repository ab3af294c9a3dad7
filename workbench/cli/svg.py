"""``urc svg``: draw the tree after a step as SVG (Graphviz) or DOT text."""

from __future__ import annotations

import os

from ..model.scenarios.scenario import STDIN, ScenarioError
from .common import EXIT_OK, STORED_HELP, load_one, say, step_in_range


def add_parser(command) -> None:
    svg = command("svg", "draw the tree after a step as SVG (or DOT)",
                  "Draw the state after step N as an SVG picture (Graphviz dot), or its DOT text; with --diff M the "
                  "changes since step M are highlighted and evicted nodes drawn as ghosts.")
    svg.add_argument("file", metavar="FILE", help=STORED_HELP)
    svg.add_argument("--step", type=int, default=None, metavar="N", help="the state after step N (default: the last)")
    svg.add_argument("--diff", type=int, default=None, metavar="M", help="highlight what changed since step M")
    svg.add_argument("-o", "--output", metavar="OUT",
                     help="where to write (default: FILE's name with -stepN.svg or .dot, here); - writes to stdout")
    svg.add_argument("--dot", action="store_true", help="write DOT text instead of SVG (no Graphviz needed)")
    svg.add_argument("--max-nodes", type=int, default=500, metavar="K",
                     help="draw at most K nodes; the rest are folded into placeholders that say what they hold "
                          "(default 500)")
    svg.add_argument("--force", action="store_true", help="overwrite an existing output file (never an input)")


def run(args) -> int:
    if args.max_nodes < 1:
        raise ScenarioError("--max-nodes must be at least 1")
    scenario, timeline_of = load_one(args.file)  # a .urcdb store is read, not run
    step = step_in_range("--step", len(scenario.steps) if args.step is None else args.step, scenario)
    if args.diff is not None:
        step_in_range("--diff", args.diff, scenario)
    stem = "stdin" if args.file == STDIN else os.path.splitext(os.path.basename(args.file))[0]
    output = args.output or f"{stem}-step{step}.{'dot' if args.dot else 'svg'}"
    from ..model.scenarios.outputs import check_output, open_output

    check_output(output, [args.file], args.force, "-o")
    from ..render.dot import render_svg
    from ..render.picture import picture

    timeline = timeline_of()
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
        say(f"wrote {output}")
    return EXIT_OK
