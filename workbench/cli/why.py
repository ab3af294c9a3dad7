"""``urc why``: the chain of causes behind a node, or behind where a match stopped."""

from __future__ import annotations

from ..model.scenarios.errors import printable, shown
from ..model.scenarios.scenario import ScenarioError
from .common import EXIT_OK, STORED_HELP, load_one, step_in_range


def add_parser(command) -> None:
    why = command("why", "explain how a node or a request came to be as it is, or why a match stopped where it did",
                  "The chain of causes, in sentences built from the events: when each component's data on the node "
                  "was set, tombstoned, locked or evicted, by which step, op and request; with --request, which steps "
                  "changed the request's prefix, lock and row and why (--about prefix or tail narrows it); with "
                  "--session, which evictions took the session's tagged data and why its tag did not save it, "
                  "or why its data is still there; with --prefetch, what each stage of a prefetch from storage "
                  "found and why it ended as it did; without any of them, why the step's match stopped where it did "
                  "(each component's verdict).")
    why.add_argument("file", metavar="FILE", help=STORED_HELP)
    why.add_argument("--step", type=int, default=None, metavar="N", help="the state after step N (default: the last)")
    why.add_argument("--node", type=int, default=None, metavar="ID", help="the node to explain (see urc show)")
    why.add_argument("--request", default=None, metavar="RID", help="the request to explain (its name in the file)")
    why.add_argument("--session", default=None, metavar="SID",
                     help="the session to explain: why its data was evicted or is still there")
    why.add_argument("--prefetch", default=None, metavar="RID",
                     help="the prefetch from storage to explain (its request id in the file)")
    why.add_argument("--about", choices=("prefix", "tail"), default=None,
                     help="with --request: only why its prefix changed, or only why its tail was freed")


def run(args) -> int:
    scenario, timeline_of = load_one(args.file)  # a .urcdb store is read, not run
    step = step_in_range("--step", len(scenario.steps) if args.step is None else args.step, scenario)
    from ..model.debugging.why import why_match, why_node
    from ..model.debugging.why_request import why_request

    if args.about is not None and args.request is None:
        raise ScenarioError("--about needs --request", scenario.path)
    if sum(x is not None for x in (args.request, args.node, args.session, args.prefetch)) > 1:
        raise ScenarioError("ask about one of a node, a request, a session or a prefetch", scenario.path)
    if args.node is not None and not 0 <= args.node < 2**63:  # a store's ids are SQLite integers
        raise ScenarioError(f"--node must be a node id between 0 and 2**63-1 (got {shown(args.node)})",
                            scenario.path)
    timeline = timeline_of()
    try:
        if args.prefetch is not None:
            from ..model.debugging.why_prefetch import why_prefetch

            answer = why_prefetch(timeline, step, args.prefetch)
        elif args.session is not None:
            from ..model.debugging.why_session import why_session

            answer = why_session(timeline, step, args.session)
        elif args.request is not None:
            answer = why_request(timeline, step, args.request, args.about)
        else:
            answer = why_match(timeline, step) if args.node is None else why_node(timeline, step, args.node)
    except ValueError as exc:
        raise ScenarioError(str(exc), scenario.path) from None
    print(printable(answer.text(), lines=True))  # its sentences name the file's requests and sessions
    return EXIT_OK
