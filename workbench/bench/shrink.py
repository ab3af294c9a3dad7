"""``urc bench --shrink``: how long ``urc shrink`` takes to cut a planted fault out of a
long trace, and to what size.

The trace is the fuzzer's own workload (Full, page 1, run step by step so every refused
op carries its ``expect_error``, as a recording's would) with a catalogued fault's
shrunk repro appended under fresh names: the fault is on from the first step but only
the repro's ops (session ops the workload never draws) make it act, so the first failed
check is at the very end. Reported: the run that finds the target, the shrinking, the
steps left and the candidates run. With ``--store`` the trace is first checked into a
stored run (``urc run --store``) and the store is shrunk, in an interpreter of its own so
its peak resident memory is the shrink's alone."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FAULT = "close-drops-shared-prefix-refs"  # a session fault: the workload draws no session op


def planted_trace(path: Path, steps: int, seed: int = 0) -> int:
    """Write the trace: ``steps`` workload steps then the fault's repro. Returns its length.

    The workload runs on a bare cache, each step checked as the loader would and
    written at once: no runner, so nothing of the run is kept and memory stays flat
    whatever ``steps`` is. A refused op is written with its error as ``expect_error``."""
    from cache import CacheError
    from ..model.fuzzing.config import FuzzConfig
    from ..model.fuzzing.generator import OpGenerator
    from ..model.scenarios.names import Names
    from ..model.scenarios.scenario import load_scenario, scenario_from_records
    from ..model.scenarios.step import check_step
    from ..model.timeline.driver import CacheDriver
    from ..model.timeline.runner import build_cache

    repro = load_scenario(f"fuzz/{FAULT}")  # a bundled scenario
    config = FuzzConfig(("full",), 1)
    workload = scenario_from_records({"schema": 1, "scenario": {"name": "workload"},
                                      "config": config.scenario_config()}, [])
    header = {"schema": 1, "scenario": {"name": f"planted-{FAULT}"},
              "config": {**config.scenario_config(), "session_radix_cache": True, "faults": [FAULT]}}
    cache = build_cache(workload)
    driver = CacheDriver(cache)
    names = Names(workload.config["components"], False, False)
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps(header) + "\n")
        for index, raw in enumerate(itertools.islice(OpGenerator(config, seed), steps)):
            step = check_step(index, raw, workload.path, lambda field=None: None, workload.config, names)
            try:
                driver.run(step.op, step.fields)
            except CacheError as exc:
                raw = {**raw, "expect_error": str(exc)}
            cache.tree.take_touched()  # (what a runner reads after each step: nobody here)
            out.write(json.dumps({k: v for k, v in raw.items() if k != "expect"}) + "\n")
            written += 1
        for step in repro.steps:
            out.write(json.dumps(_renamed(step.raw)) + "\n")
            written += 1
    return written


def _renamed(raw: dict) -> dict:
    """A repro step under fresh names (each name field, by its op's declaration, gets a
    ``z``), its expectations left out: no name of the workload's is reused."""
    from ..model import ops

    spec = ops.get(raw["op"])
    named = {f.name for f in spec.fields if f.defines or f.uses}
    return {k: (f"z{v}" if k in named else v) for k, v in raw.items() if k != "expect"}


def shrink_report(steps: int = 100_000, seed: int = 0, budget_s: float = 600.0,
                  emit: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    from ..model.fuzzing.shrink_file import first_check_failed, shrink_to_target
    from ..model.scenarios.scenario import load_scenario

    with tempfile.TemporaryDirectory(prefix="urc-bench-shrink-") as folder:
        trace = Path(folder) / "planted.jsonl"
        start = time.perf_counter()
        length = planted_trace(trace, steps, seed)
        built = time.perf_counter() - start
        emit(f"built a {length:,}-step trace with {FAULT} planted at its end in {built:.1f} s")
        start = time.perf_counter()
        scenario = load_scenario(str(trace))
        target = first_check_failed(scenario)
        found = time.perf_counter() - start
        if target is None:
            return {"steps": length, "error": "the planted fault did not fail a check"}
        emit(f"first failed check: step {target.step:,} ({target.finding.check}) after {found:.1f} s")
        outcome = shrink_to_target(scenario, target, budget_s)
        report = {"trace_steps": length, "fault": FAULT, "target_step": target.step, "check": target.finding.check,
                  "find_s": round(found, 1), "shrink_s": round(outcome.seconds, 1),
                  "total_s": round(found + outcome.seconds, 1), "shrunk_steps": len(outcome.steps),
                  "candidates": outcome.runs}
        emit(f"shrunk to {len(outcome.steps)} steps in {outcome.seconds:.1f} s ({outcome.runs} candidates)")
        return report


def shrink_text(report: dict[str, Any]) -> str:
    if "error" in report:
        return f"shrink: {report['error']}"
    return (f"urc shrink on a {report['trace_steps']:,}-step trace ({report['fault']} planted at step "
            f"{report['target_step']:,}): found in {report['find_s']} s, shrunk to {report['shrunk_steps']} steps in "
            f"{report['shrink_s']} s ({report['candidates']} candidates); {report['total_s']} s in all")


def shrink_store_report(steps: int = 1_000_000, seed: int = 0, budget_s: float = 600.0,
                        emit: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """The planted trace checked into a store, then ``urc shrink`` on the store: each
    part in its own interpreter, with its seconds and peak resident memory."""
    with tempfile.TemporaryDirectory(prefix="urc-bench-shrink-") as folder:
        trace, store = Path(folder) / "planted.jsonl", Path(folder) / "planted.urcdb"
        start = time.perf_counter()
        length = planted_trace(trace, steps, seed)
        emit(f"built a {length:,}-step trace with {FAULT} planted at its end in {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        ran = _child(["workbench.bench.store", "--run", str(trace), str(store)])
        stored_s = time.perf_counter() - start
        emit(f"checked into a store in {stored_s:.1f} s (peak {ran['peak_rss_mb']:,} MB); shrinking the store")
        trace.unlink()  # the shrink reads the store alone
        start = time.perf_counter()
        shrunk = _child(["workbench.bench.shrink", str(store), str(budget_s)])
        wall = time.perf_counter() - start
        if "error" in shrunk:
            return {"steps": length, "error": shrunk["error"]}
        emit(f"shrunk to {shrunk['shrunk_steps']} steps in {wall:.1f} s (peak {shrunk['peak_rss_mb']:,} MB)")
        return {"store_steps": length, "fault": FAULT, "store_s": round(stored_s, 1),
                "store_peak_rss_mb": ran["peak_rss_mb"], "store_mb": round(store.stat().st_size / 1e6),
                **shrunk, "shrink_process_s": round(wall, 1)}


def _child(module_args: list[str]) -> dict[str, Any]:
    child = subprocess.run([sys.executable, "-m", *module_args], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    if child.returncode not in (0, 1):
        raise RuntimeError(f"{module_args[0]} failed: {child.stderr.strip()[-400:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def shrink_stored(path: str, budget_s: float) -> dict[str, Any]:
    """What ``urc shrink RUN.urcdb`` does, here, with this process's peak memory."""
    from ..model.fuzzing.shrink_file import first_check_failed, shrink_to_target
    from ..model.timeline.stored import open_store

    start = time.perf_counter()
    timeline = open_store(path)
    target = first_check_failed(timeline.scenario, timeline)
    found = time.perf_counter() - start
    if target is None:
        return {"error": "the planted fault did not fail a check"}
    outcome = shrink_to_target(timeline.scenario, target, budget_s)
    with open("/proc/self/status") as status:
        peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    return {"target_step": target.step, "check": target.finding.check, "find_s": round(found, 1),
            "shrink_s": round(outcome.seconds, 1), "shrunk_steps": len(outcome.steps), "candidates": outcome.runs,
            "peak_rss_mb": round(peak_kb / 1024)}


def shrink_store_text(report: dict[str, Any]) -> str:
    if "error" in report:
        return f"shrink: {report['error']}"
    return (f"urc shrink on a {report['store_steps']:,}-step stored run ({report['fault']} planted at step "
            f"{report['target_step']:,}; checked into the store in {report['store_s']} s): shrunk to "
            f"{report['shrunk_steps']} steps in {report['shrink_s']} s ({report['candidates']} candidates), "
            f"{report['shrink_process_s']} s as a process, peak {report['peak_rss_mb']:,} MB")


if __name__ == "__main__":
    print(json.dumps(shrink_stored(sys.argv[1], float(sys.argv[2]))))
