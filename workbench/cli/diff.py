"""``urc diff``: what changed between two steps of a scenario."""

from __future__ import annotations

import json

from ..model.scenarios.errors import printable
from .common import EXIT_OK, STORED_HELP, load_one, step_in_range


def add_parser(command) -> None:
    diff = command("diff", "what changed between two steps of a scenario",
                   "Nodes added, removed and split, values and tombstones, lock deltas, LRU moves and pool deltas "
                   "from the state after step M to the state after step N.")
    diff.add_argument("file", metavar="FILE", help=STORED_HELP)
    diff.add_argument("--from", dest="start", type=int, default=None, metavar="M",
                      help="the earlier step (default: N - 1; 0: the empty start)")
    diff.add_argument("--to", dest="end", type=int, default=None, metavar="N", help="the later step (default: the last)")
    diff.add_argument("--json", action="store_true", help="print the diff as JSON")


def run(args) -> int:
    scenario, timeline_of = load_one(args.file)  # a .urcdb store is read, not run
    end = step_in_range("--to", len(scenario.steps) if args.end is None else args.end, scenario)
    start = step_in_range("--from", max(0, end - 1) if args.start is None else args.start, scenario)
    from ..model.timeline.diff import diff_json, diff_text

    timeline = timeline_of()
    diff = timeline.diff(start, end)
    if args.json:
        print(json.dumps(diff_json(diff), indent=1))
    else:
        print(f"{printable(scenario.path)}: from step {start} to step {end}")
        print(printable("\n".join(diff_text(diff)), lines=True) or "  (no change)")
    return EXIT_OK
