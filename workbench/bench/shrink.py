"""``urc bench --shrink``: how long ``urc shrink`` takes to cut a planted fault out of a
long trace, and to what size.

The trace is the fuzzer's own workload (Full, page 1, run step by step so every refused
op carries its ``expect_error``, as a recording's would) with a catalogued fault's
shrunk repro appended under fresh names: the fault is on from the first step but only
the repro's ops (session ops the workload never draws) make it act, so the first failed
check is at the very end. Reported: the run that finds the target, the shrinking, the
steps left and the candidates run."""

from __future__ import annotations

import itertools
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FAULT = "close-drops-shared-prefix-refs"  # a session fault: the workload draws no session op


def planted_trace(path: Path, steps: int, seed: int = 0) -> int:
    """Write the trace: ``steps`` workload steps then the fault's repro. Returns its length."""
    from ..model.fuzzing.config import FuzzConfig
    from ..model.fuzzing.fuzz import LockstepRun, OpGenerator
    from ..model.scenarios.scenario import load_scenario

    repro = load_scenario(f"fuzz/{FAULT}")  # a bundled scenario
    config = FuzzConfig(("full",), 1)
    header = {"schema": 1, "scenario": {"name": f"planted-{FAULT}"},
              "config": {**config.scenario_config(), "session_radix_cache": True, "faults": [FAULT]}}
    run = LockstepRun(config, checks=False)
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps(header) + "\n")
        for raw in itertools.islice(OpGenerator(config, seed), steps):
            run.step(raw)
            out.write(json.dumps({k: v for k, v in run.steps[-1].items() if k != "expect"}) + "\n")
            written += 1
            if len(run.steps) >= 4096:  # the trace streams out: the run keeps no history
                run.steps.clear()
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
