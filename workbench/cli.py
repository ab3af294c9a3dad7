"""``urc``: the workbench's command line."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="urc", description="Unified Radix Cache workbench")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run a small built-in sequence and print the tree after each step")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo()
    return 2


if __name__ == "__main__":
    sys.exit(main())
