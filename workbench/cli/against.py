"""The bridge's options on ``urc run``, ``urc tui`` and ``urc bench`` (``--against
sglang``) and what each runs. Not a subcommand: shared by those three. SGLang is
imported only when one of them is used."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from ..model.scenarios.errors import printable
from ..model.scenarios.scenario import ScenarioError

from .common import EXIT_CHECK_FAILED as EXIT_DIVERGED, EXIT_OK


def add_against_options(parser, run: bool = False) -> None:
    parser.add_argument("--against", choices=("sglang",), default=None,
                        help="compare with SGLang 0.5.23's own cache (needs SGLang 0.5.23 importable, CPU only: "
                             "make bridge-setup)")
    parser.add_argument("--sglang-core", choices=("python", "rust"), default=None,
                        help="with --against: SGLang's tree core (default python: its nodes can be compared; "
                             "rust: op results and pools only)" if run else
                             "with --against: SGLang's tree core (urc tui: default python; urc bench: default both)")
    parser.add_argument("--allow-version", action="store_true",
                        help="with --against: run against another SGLang version, with a warning")
    if run:
        parser.add_argument("--compare-every", type=int, default=1, metavar="N",
                            help="with --against: compare the whole state every N steps and after the last "
                                 "(default 1; op results are compared at every step)")


def check_against_use(args, clashes: dict[str, bool]) -> None:
    """Refuse bridge options without --against, and options --against does not combine with."""
    if args.against is None:
        used = [flag for flag, on in (("--sglang-core", args.sglang_core is not None),
                                      ("--allow-version", args.allow_version),
                                      ("--compare-every", getattr(args, "compare_every", 1) != 1)) if on]
        if used:
            raise ScenarioError(f"{used[0]} only applies with --against sglang")
        return
    for flag, on in clashes.items():
        if on:
            raise ScenarioError(f"--against does not go with {flag}")


def run_against(args, scenarios) -> int:
    """``urc run --against sglang``: one line per file (and the divergence's two sides),
    or a JSON array; exit 1 when any file diverges."""
    from ..bridge.differential import detail_lines, run_against as differential, summary_line

    if args.compare_every <= 0:
        raise ScenarioError("--compare-every must be a positive int")
    reports = []
    for scenario in scenarios:
        report = differential(scenario, args.sglang_core or "python", args.allow_version, args.compare_every)
        reports.append(report)
        if not args.json:
            print(printable(summary_line(report)), flush=True)  # the file's path and its steps' fields
            for line in detail_lines(report):
                print(printable(line))
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=1))
    return EXIT_OK if all(r.agrees for r in reports) else EXIT_DIVERGED


def divergences(args, scenarios) -> dict[str, tuple[int, str]]:
    """For ``urc tui --against sglang``: file -> (step, one line) of each file's first
    divergence, shown as a banner when the timeline reaches that step."""
    from ..bridge.differential import detail_lines, run_against as differential, summary_line

    found = {}
    for scenario in scenarios:
        report = differential(scenario, args.sglang_core or "python", args.allow_version)
        print(printable(summary_line(report)), file=sys.stderr)
        if report.divergence is not None:
            d = report.divergence
            found[scenario.path] = (d.step, " ".join([summary_line(report).split(": ", 1)[1], *[
                line.strip() for line in detail_lines(report) if not line.strip().startswith("by design")]]))
    return found


def bench_against(args, scenario) -> int:
    from ..bridge.side_by_side import bench_against as side_by_side, table_lines

    cores = (args.sglang_core,) if args.sglang_core else ("python", "rust")
    if scenario is None:  # the seeded workload (--requests, --seed, --components), written as a trace
        with tempfile.TemporaryDirectory() as tmp:
            report = side_by_side(_workload_trace(args, Path(tmp)), cores, args.allow_version, args.keys or "array")
        report["file"] = f"seeded workload: {args.requests} requests, seed {args.seed}, {args.components}" + (
            f", {args.repeat:g} repeated" if args.repeat else "")
    else:
        report = side_by_side(scenario, cores, args.allow_version, args.keys or "array")
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        held = "list" if args.keys == "list" else "array('q')"
        print(f"{printable(report['file'])}: ours against SGLang {report['sglang']}, mean µs per call "
              f"(ours: key from the step's {held} + the call, "
              f"SGLang's key wrapping array('q'); × = SGLang / ours, above 1 ours is faster)")
        for line in table_lines(report):
            print(line)
    return EXIT_OK


def _workload_trace(args, folder: Path):
    from ..model.scenarios.scenario import load_scenario
    from ..model.scenarios.workload import write_trace

    path = folder / "workload.jsonl"
    with path.open("w", encoding="utf-8") as stream:
        write_trace(stream, args.requests, args.seed, tuple(args.components.split(",")), args.repeat)
    return load_scenario(path)
