"""``urc``: the workbench's command line.

Exit codes: 0 everything passed, 1 an expectation, invariant or fingerprint check
failed, 2 an invalid file or wrong usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional

from rich.console import Console


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors exit 2 with one line, like invalid files
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="urc", description="Unified Radix Cache workbench")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run scenario files headlessly and check every step")
    run.add_argument("files", nargs="+", metavar="FILE", help=".toml scenarios or .jsonl traces")
    run.add_argument("--json", action="store_true", help="print a JSON array, one object per file")
    run.add_argument("--states", action="store_true", help="with --json: add the state after every step")
    run.add_argument("--record", metavar="OUT.jsonl", help="write a JSONL trace, one executed step per line as it runs")

    show = sub.add_parser("show", help="print the tree after a step of a scenario")
    show.add_argument("file", metavar="FILE")
    show.add_argument("more", nargs="*", metavar="FILE", help="with --walk: further chapters to walk in turn")
    show.add_argument("--step", type=int, default=None, help="step number (default: the last; 0: the start)")
    show.add_argument("--walk", action="store_true", help="print every step: description, op, result, events, tree")

    sub.add_parser("demo", help="run a small built-in sequence and print the tree after each step")

    bench = sub.add_parser("bench", help="time the cache calls (the seeded workload, or a scenario/trace)")
    bench.add_argument("--trace", metavar="FILE", help="replay a scenario or JSONL trace, timing only the cache calls")
    bench.add_argument("--requests", type=int, default=5000)
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    bench.add_argument("--components", default="full", help="comma-separated, e.g. full,swa,mamba (window 128)")
    bench.add_argument("--tree-sizes", default="1000,100000", help="comma-separated node counts for the scaling run")
    bench.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    from .scenario import ScenarioError

    try:
        return {"run": _run, "show": _show, "demo": _demo, "bench": _bench}[args.command](args)
    except ScenarioError as exc:
        print(f"urc {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _run(args) -> int:
    from .export import timeline_json
    from .report import print_run_report
    from .runner import Runner, cache_config
    from .scenario import ScenarioError, load_scenario

    if args.record and len(args.files) != 1:
        raise ScenarioError("--record takes exactly one scenario file")
    if args.states and not args.json:
        raise ScenarioError("--states only applies with --json")
    scenarios = [load_scenario(path) for path in args.files]  # validate all before running any
    for scenario in scenarios:
        cache_config(scenario)
    console = Console(stderr=args.json)
    timelines = []
    for scenario in scenarios:
        if args.record:
            with open(args.record, "w", encoding="utf-8") as stream:
                timeline = Runner(scenario, record=stream).run()
        else:
            timeline = Runner(scenario).run()
        timelines.append(timeline)
        if not args.json:
            print_run_report(timeline, console)
    if args.json:
        print(json.dumps([timeline_json(t, args.states) for t in timelines], indent=1))
    return 0 if all(t.passed for t in timelines) else 1


def _show(args) -> int:
    from .report import step_panel, walk
    from .runner import run_scenario
    from .scenario import ScenarioError, load_scenario
    from .tree_view import render_state

    if args.more and not args.walk:
        raise ScenarioError("several files only with --walk")
    console = Console()
    if args.walk:
        scenarios = [load_scenario(path) for path in [args.file, *args.more]]
        timelines = [run_scenario(s) for s in scenarios]
        for timeline in timelines:
            walk(timeline, console)
        return 0 if all(t.passed for t in timelines) else 1
    scenario = load_scenario(args.file)
    timeline = run_scenario(scenario)
    n = len(timeline) if args.step is None else args.step
    if not 0 <= n <= len(timeline):
        raise ScenarioError(f"--step must be between 0 and {len(timeline)}", args.file)
    if n == 0:
        console.print(render_state(timeline.initial))
    else:
        console.print(step_panel(timeline.records[n - 1], scenario.path))
    return 0


def _demo(args) -> int:
    from .demo import run_demo

    return run_demo()


def _bench(args) -> int:
    from .scenario import ScenarioError

    if args.trace:
        from .replay import replay_timed

        report = replay_timed(args.trace, device=args.device)
        if args.json:
            print(json.dumps(report, indent=1))
        else:
            for op, s in report["ops"].items():
                print(f"{op:14s} n={s['n']:6d} mean {s.get('mean_us')} µs  p50 {s.get('p50_us')}  p99 {s.get('p99_us')}")
        return 0
    if args.requests <= 0:
        raise ScenarioError("--requests must be positive")
    try:
        sizes = tuple(int(x) for x in args.tree_sizes.split(",") if x)
    except ValueError:
        raise ScenarioError(f"--tree-sizes must be comma-separated ints (got {args.tree_sizes!r})") from None
    from .bench import BenchConfig, full_report, print_report

    components = tuple(c.strip() for c in args.components.split(",") if c.strip())
    if not components or components[0] != "full" or not set(components) <= {"full", "swa", "mamba"}:
        raise ScenarioError(f"--components must start with full and name only full, swa, mamba (got {args.components!r})")
    config = BenchConfig(requests=args.requests, seed=args.seed, device=args.device, components=components)
    report = full_report(config, sizes if components == ("full",) else ())
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report, Console())
    return 0


if __name__ == "__main__":
    sys.exit(main())
