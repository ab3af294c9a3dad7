#!/usr/bin/env python3
"""Ours against SGLang 0.5.23 on the same trace, timed in the same minutes (development
only: needs ../shared/oracle and its ~/.venv-sgl).

    python3 tools/bench_vs_sglang.py [--components full,full+swa,...] [--requests 2000] [--rounds 2]

Per config: writes the benchmark trace (make_bench_trace.py), then in each round runs
`urc bench --trace --json` (ours, the caller's path), trace_timer.py --backend rust and
--backend python back to back; prints the median over rounds of each mean and the ratio
SGLang / ours (> 1: ours is faster) and ours against the bare-tree floor of the same
run, as a Markdown table, and the raw reports as JSON on stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORACLE = ROOT.parent / "shared" / "oracle"
SGL_PY = Path.home() / ".venv-sgl" / "bin" / "python"
OPS = ("match", "insert", "evict", "lock", "unlock")


def run_json(cmd: list[str]) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1] if out.lstrip().startswith("{\"backend\"") else out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--components", default="full,full+swa,full+mamba,full+swa+mamba")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    urc = [sys.executable, "-m", "workbench", "bench"]
    print("| config | op | ours caller µs | ours call µs | Rust µs | Python µs | × Rust | × Python | floor µs | ours / floor |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.components.split(","):
            trace = Path(tmp) / f"{config}.jsonl"
            with trace.open("w") as out:
                subprocess.run([sys.executable, str(ORACLE / "make_bench_trace.py"), "--components",
                                config.replace("+", ","), "--requests", str(args.requests)], stdout=out, check=True)
            runs: dict[str, list[dict]] = {"ours": [], "floor": [], "rust": [], "python": []}
            for _ in range(args.rounds):
                report = run_json([*urc, "--trace", str(trace), "--json"])
                runs["ours"].append(report["ops"])
                runs["floor"].append(report["floor"])
                for backend in ("rust", "python"):
                    cmd = [str(SGL_PY), str(ORACLE / "trace_timer.py"), str(trace), "--backend", backend]
                    runs[backend].append(run_json(cmd)["ops"])
            print(json.dumps({"config": config, **runs}), file=sys.stderr)

            def median(side: str, op: str, field: str = "mean_us") -> float:
                values = [r[op][field] for r in runs[side] if op in r]
                return statistics.median(values) if values else float("nan")

            for op in OPS:
                ours, call = median("ours", op), median("ours", op, "call_mean_us")
                rust, python, floor = median("rust", op), median("python", op), median("floor", op)
                floor_cells = f"{floor:.1f} | {ours / floor:.1f}" if floor == floor else "– | –"  # nan: no floor
                print(f"| {config} | {op} | {ours:.1f} | {call:.1f} | {rust:.1f} | {python:.1f} | "
                      f"{rust / ours:.2f} | {python / ours:.2f} | {floor_cells} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
