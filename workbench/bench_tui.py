"""``urc bench --tui``: what a user waits for in the workbench, measured through
Textual's Pilot on a headless 160x50 screen (the screen is composed and rendered to
strips as in a terminal; only the write to the terminal is skipped).

Each part (the 2,000-request trace, a 10,000-node tree) runs in a fresh interpreter
so its peak RSS is its own: first paint and full load with the background loader,
then key press to repaint for next / previous / last / first and random jumps.
Targets (the TUI issue): first paint <= 3 s, a step <= 50 ms, peak RSS <= 1 GB.
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import statistics
import subprocess
import sys
import time

PARTS = ("trace-2k", "tree-10k")
PRESSES = 20
SIZE = (160, 50)


def tui_report(parts: tuple[str, ...] = PARTS) -> dict:
    """Every part, each in its own interpreter."""
    out = {}
    for name in parts:
        proc = subprocess.run([sys.executable, "-m", "workbench.bench_tui", name], capture_output=True, text=True)
        if proc.returncode != 0:
            out[name] = {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
        else:
            out[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _scenario(part: str):
    """As a user opens it: the trace from a file; the tree from generated records."""
    import tempfile

    from .model.scenario import load_scenario, scenario_from_records
    from .model.workload import write_trace

    if part == "trace-2k":
        with tempfile.TemporaryDirectory() as tmp:
            path = f"{tmp}/trace.jsonl"
            with open(path, "w", encoding="utf-8") as stream:
                write_trace(stream, 2000, 0, ("full",))
            return load_scenario(path)
    if part == "tree-10k":
        nodes = 10000
        header = {"schema": 1, "scenario": {"name": "tree-10k"},
                  "config": {"components": ["full"], "kv_size": (nodes + 10) * 4}}
        steps = [{"op": "insert", "key": [i, i + 1, i + 2]} for i in range(1, 3 * nodes, 3)]
        return scenario_from_records(header, steps)
    raise SystemExit(f"unknown part {part!r}; known: {', '.join(PARTS)}")


async def _timed_press(pilot, key: str) -> float:
    """One key press, from the press to after the repaint that follows it (ms)."""
    start = time.perf_counter()
    await pilot.press(key)
    await pilot.pause()
    return (time.perf_counter() - start) * 1e3


async def _timed_jump(pilot, app, step: int) -> float:
    """A jump as the step list and the go-to dialog make it, to the repaint (ms)."""
    start = time.perf_counter()
    app.cursor.go(step)
    app.refresh_view()
    await pilot.pause()
    return (time.perf_counter() - start) * 1e3


async def _measure(part: str) -> dict:
    from .tui.app import WorkbenchApp
    from .tui.widgets.step_list import StepList

    scenario = _scenario(part)
    start = time.perf_counter()
    app = WorkbenchApp([scenario], background=True)
    async with app.run_test(size=SIZE) as pilot:
        while not (app.cursor.available > 0 and app.query_one(StepList).option_count > 1):
            await pilot.pause(0.005)
        await pilot.pause()
        first_paint = time.perf_counter() - start
        steps_at_first_paint = app.cursor.available
        while not app.cursor.chapter.loaded:
            await pilot.pause(0.01)
        await app.workers.wait_for_complete()
        await pilot.pause()
        loaded = time.perf_counter() - start

        n, rng = app.cursor.available, random.Random(0)
        figures = {}
        await _timed_jump(pilot, app, rng.randrange(n // 2, n - PRESSES))  # start late: the largest states
        figures["next"] = [await _timed_press(pilot, "n") for _ in range(PRESSES)]
        figures["previous"] = [await _timed_press(pilot, "p") for _ in range(PRESSES)]
        await _timed_jump(pilot, app, 0)
        last, first = [], []
        for _ in range(PRESSES):  # alternate so each press really moves (0 <-> the last step)
            last.append(await _timed_press(pilot, "greater_than_sign"))
            first.append(await _timed_press(pilot, "less_than_sign"))
        figures["last"], figures["first"] = last, first
        figures["jump"] = [await _timed_jump(pilot, app, rng.randrange(1, n + 1)) for _ in range(PRESSES)]
        assert app.cursor.available == n
    return {
        "steps": n, "nodes": len(app.cursor.timeline.store.current) - 1,
        "first_paint_seconds": round(first_paint, 2), "steps_at_first_paint": steps_at_first_paint,
        "load_seconds": round(loaded, 2),
        **{f"{name}_ms": _summary(samples) for name, samples in figures.items()},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _summary(samples: list[float]) -> dict:
    return {"mean": round(statistics.fmean(samples), 1), "max": round(max(samples), 1)}


if __name__ == "__main__":
    if len(sys.argv) == 1:
        print(json.dumps(tui_report(), indent=2))
    else:
        print(json.dumps(asyncio.run(_measure(sys.argv[1]))))
