"""``urc``: the workbench's command line, one module per subcommand.

One error path for every command: an expected failure is one line on stderr and an
exit code (see ``EXIT_CODES``); a closed pipe ends quietly; anything unexpected is one
line that points at ``--debug``. Scenario files are checked before torch is imported,
so a typo is reported at once: subcommand modules import nothing heavy at the top.

Adding a subcommand is one module here (``add_parser(command)`` and ``run(args)``)
plus one line in ``SUBCOMMANDS``.
"""

from __future__ import annotations

import argparse
from typing import Optional

from ..model.scenarios.errors import DATA_ERRORS
from ..model.scenarios.scenario import ScenarioError
from ..model.scenarios.storage_place import storage_scope
from ..model.timeline.step_hold import interrupt_behind
from . import bench, demo, diff, fuzz, listen, ops, plot, run, show, shrink, svg, tui, why
from .common import (EXIT_BAD_INPUT, EXIT_CODES, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED, Parser,
                     Terminated, interrupts_between_steps, say, silence_stdout, stores_named, version)

__all__ = ["EXIT_CODES", "SUBCOMMANDS", "build_parser", "main"]

# In the order ``urc --help`` lists them.
SUBCOMMANDS = (run, diff, why, show, svg, plot, tui, listen, fuzz, shrink, ops, demo, bench)


def build_parser() -> argparse.ArgumentParser:
    form = argparse.RawDescriptionHelpFormatter
    parser = Parser(
        prog="urc", description="Unified Radix Cache workbench: run, inspect and time cache scenarios.",
        epilog=EXIT_CODES, formatter_class=form,
    )
    parser.add_argument("--version", action="version", version=f"urc {version()}")
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an internal error")
    debug = Parser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND")

    for module in SUBCOMMANDS:
        def command(name: str, help: str, description: str, handler=module.run) -> argparse.ArgumentParser:
            parsed = sub.add_parser(name, help=help, description=description, epilog=EXIT_CODES, formatter_class=form,
                                    parents=[debug])
            parsed.set_defaults(handler=handler)
            return parsed

        module.add_parser(command)
    return parser


def _stopped(name: str, stop: BaseException) -> int:
    terminated = isinstance(stop, Terminated)
    say(f"{name}: {'terminated' if terminated else 'interrupted'}")
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    name = f"urc {args.command}"
    try:
        with interrupts_between_steps(), storage_scope(getattr(args, "storage_dir", None)):  # storage never outlives it
            return args.handler(args)
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (Terminated): the cleanups ran on the way here
        return _stopped(name, stop)
    except ScenarioError as exc:
        say(f"{name}: {exc}")
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # the reader went away (``| head``): nothing more to say
        silence_stdout()
        return EXIT_OK
    except Exception as exc:
        stop = interrupt_behind(exc)  # a clean-up that failed on the way out of a Ctrl-C or SIGTERM
        if stop is not None:
            return _stopped(name, stop)
        if getattr(args, "debug", False):
            raise
        first = (str(exc).splitlines() or [""])[0][:300]
        stores = stores_named(args)
        if stores and isinstance(exc, DATA_ERRORS):  # a stored run's value not as urc writes it
            say(f"{name}: {stores[0]}: damaged store: a value is not as urc writes it ({type(exc).__name__}: {first})")
            return EXIT_BAD_INPUT
        say(f"{name}: internal error: {type(exc).__name__}: {first} (run again with --debug for the traceback)")
        return EXIT_INTERNAL
