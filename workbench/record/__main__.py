"""``python -m workbench.record -o trace.jsonl [--force] -- COMMAND …``: run COMMAND with
every SGLang cache its Python processes build recorded (workbench/record/hook.py).
Exit status: COMMAND's; 2 for bad usage or an existing output without --force."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import workbench

BOOT = Path(__file__).resolve().parent / "boot"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        print("usage: python -m workbench.record -o TRACE.jsonl [--force] -- COMMAND [ARGS …]", file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="python -m workbench.record")
    parser.add_argument("-o", "--output", required=True, metavar="TRACE.jsonl")
    parser.add_argument("--force", action="store_true", help="overwrite TRACE.jsonl if it exists")
    try:
        args = parser.parse_args(argv[:split])
    except SystemExit as exc:
        return 2 if exc.code else 0
    command = argv[split + 1 :]
    out = Path(args.output)
    if not command:
        print("workbench.record: no command to run after --", file=sys.stderr)
        return 2
    if out.suffix != ".jsonl":
        print(f"workbench.record: {out}: traces end in .jsonl", file=sys.stderr)
        return 2
    if not out.resolve().parent.is_dir():
        print(f"workbench.record: {out}: no such directory {out.resolve().parent}", file=sys.stderr)
        return 2
    if out.exists():
        if not args.force:
            print(f"workbench.record: {out} exists: pick another name, or --force to replace it", file=sys.stderr)
            return 2
        out.unlink()
    env = dict(os.environ)
    env["URC_RECORD"] = str(out.resolve())
    # only the start-up hook goes first; the hook adds this package last, if the program lacks it
    env["URC_RECORD_PACKAGE"] = str(Path(workbench.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT), env.get("PYTHONPATH", "")) if p)
    try:
        return subprocess.call(command, env=env)
    except FileNotFoundError:
        print(f"workbench.record: no such command: {command[0]}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
