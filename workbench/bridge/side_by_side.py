"""``urc bench --against sglang``: ours and SGLang's cache timed on one trace in one run.

Ours is timed as ``urc bench --trace`` times it (the caller's path: key from the
step's list plus the call). SGLang's side replays the same steps through
``SGLangSide`` with the same call timer on its cache (outermost public call only,
the same op names); its keys are built before the timed call, as
``../shared/oracle/trace_timer.py`` does, so its figures are its calls alone. Both
cores are timed back to back, Python then Rust, after ours. Ratio = SGLang / ours:
above 1, ours is faster.
"""

from __future__ import annotations

import gc
from typing import Optional

from ..bench.synthetic import stats
from ..model.scenarios.scenario import Scenario
from ..model import ops
from ..bench.replay import CallTimer, _steps, replay_timed
from .sglang_env import check_version
from .sglang_side import SGLangSide

SGLANG_CALLS = ops.timed_calls(wrappers=True)  # SGLang's TreeLock wrappers (lock, unlock) count too
CORES = ("python", "rust")


def sglang_timed(scenario: Scenario, core: str, allow_version: bool = False) -> dict:
    """Per op: n, mean/p50/p99 µs of SGLang's calls on this trace, its keys wrapping
    ``array('q')`` as its scheduler's do (its Rust core refuses a list)."""
    side = SGLangSide.for_scenario(scenario, core, allow_version)
    timer = CallTimer(side.cache, SGLANG_CALLS)
    errors = 0
    gc.collect()
    gc.freeze()
    try:
        for op, fields in _steps(scenario):
            try:
                side.run(op, fields)
            except Exception:  # a refusal is part of the trace (ours counts its own the same way)
                errors += 1
    finally:
        gc.unfreeze()
        side.close()  # its store directory
    return {"errors": errors, "ops": {op: stats(calls) for op, calls in timer.samples.items() if calls}}


def bench_against(scenario: Scenario, cores: tuple[str, ...] = CORES, allow_version: bool = False,
                  keys: str = "array") -> dict:
    version = check_version(allow_version)
    ours = replay_timed(scenario, device="cpu", keys=keys)
    report = {"file": scenario.path, "steps": len(scenario.steps), "sglang": version, "keys": keys, "ours": ours["ops"],
              "floor": ours["floor"], "cores": {}, "ratio": {}}
    for core in cores:
        timed = sglang_timed(scenario, core, allow_version)
        report["cores"][core] = timed["ops"]
        report["ratio"][core] = {op: _ratio(timed["ops"].get(op), mine) for op, mine in ours["ops"].items()}
    return report


def _ratio(theirs: Optional[dict], mine: dict) -> Optional[float]:
    if not theirs or not theirs.get("n") or not mine.get("mean_us"):
        return None
    return round(theirs["mean_us"] / mine["mean_us"], 2)


def table_lines(report: dict) -> list[str]:
    """The ratio table as Markdown, one row per op."""
    cores = list(report["cores"])
    head = ["op", "ours µs (call)"] + [f"SGLang {c} µs" for c in cores] + [f"× {c}" for c in cores]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for op, mine in report["ours"].items():
        row = [op, f"{mine['mean_us']:.1f} ({mine['call_mean_us']:.1f})"]
        row += [_cell(report["cores"][c].get(op, {}).get("mean_us")) for c in cores]
        row += [_cell(report["ratio"][c].get(op)) for c in cores]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _cell(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:.2f}" if value < 10 else f"{value:.1f}"

