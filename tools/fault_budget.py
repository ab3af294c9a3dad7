"""Is every catalogued fault found by ``urc fuzz --fault F --first --time-budget SEC``,
with no config and no seed, as a user would first try it? Runs each fault in its own
``urc fuzz`` process (one job) and prints a Markdown table: the config and seed that
found it, the step, the shrunk size and the process's seconds. Exit 1 if one is missed.

    PYTHONPATH=. .venv/bin/python tools/fault_budget.py [--budget 120] [FAULT ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=120.0)
    parser.add_argument("faults", nargs="*")
    args = parser.parse_args()
    from cache.faults import catalogue

    names = args.faults or list(catalogue())
    missed = 0
    print("| fault | found on | seed | step | shrunk | seconds |\n|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory(prefix="urc-fault-budget-") as folder:
        for name in names:
            started = time.perf_counter()
            child = subprocess.run([sys.executable, "-m", "workbench", "fuzz", "--fault", name, "--first",
                                    "--time-budget", str(args.budget), "--jobs", "1", "--json",
                                    "-o", os.path.join(folder, f"{name}.toml")], capture_output=True, text=True)
            seconds = time.perf_counter() - started
            try:
                found = json.loads(child.stdout)
            except ValueError:
                found = {}
            if found.get("check"):
                print(f"| {name} | {found['config']} | {found['seed']} | {found['flagged_step']} | "
                      f"{found['shrunk_steps']} | {seconds:.1f} |", flush=True)
            else:
                missed += 1
                print(f"| {name} | NOT FOUND (exit {child.returncode}) | | | | {seconds:.1f} |", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
