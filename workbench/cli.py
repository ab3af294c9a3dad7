"""``urc``: the workbench's command line."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="urc", description="Unified Radix Cache workbench")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run a small built-in sequence and print the tree after each step")
    bench = sub.add_parser("bench", help="time the cache calls on a seeded shared-prompt workload")
    bench.add_argument("--requests", type=int, default=5000)
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    bench.add_argument("--tree-sizes", default="1000,100000", help="comma-separated node counts for the scaling run")
    bench.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo()
    if args.command == "bench":
        return _bench(args)
    return 2


def _bench(args) -> int:
    import json

    from rich.console import Console

    from .bench import BenchConfig, full_report, print_report

    if args.requests <= 0:
        print("urc bench: --requests must be positive", file=sys.stderr)
        return 2
    try:
        sizes = tuple(int(x) for x in args.tree_sizes.split(",") if x)
    except ValueError:
        print(f"urc bench: --tree-sizes must be comma-separated ints (got {args.tree_sizes!r})", file=sys.stderr)
        return 2
    report = full_report(BenchConfig(requests=args.requests, seed=args.seed, device=args.device), sizes)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report, Console())
    return 0


if __name__ == "__main__":
    sys.exit(main())
