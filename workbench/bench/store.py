"""``urc bench --store``: a long trace checked into a store file, then opened again.

Each part runs in its own interpreter, as a user would run it, so the peak resident
memory is the run's own (its ``VmHWM``: a forked child's rusage would carry the parent's
high-water mark, and building the workload takes GBs) and reopening starts cold:
the run is ``urc run TRACE --store``; the reopening (twice: the second finds the
interpreter's files cached) opens the store, shows its last step and jumps to random
steps, timing what a viewer pays per jump (the state, the step's diff and the view the
panels render); last, the workbench's first screen on the store, as ``urc tui`` opens it.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

JUMPS = 40


def store_report(steps: int, components: tuple[str, ...], seed: int = 0,
                 emit: Callable[[str], None] = lambda line: None) -> dict:
    requests = max(1, steps // 4)  # the workload's request is four steps: match, lock, insert, unlock
    with tempfile.TemporaryDirectory(prefix="urc-bench-store-") as folder:
        trace, store = os.path.join(folder, "trace.jsonl"), os.path.join(folder, "run.urcdb")
        # the workload is built whole in memory (GBs for a million steps): in its own process,
        # so this one stays small
        subprocess.run([sys.executable, "-m", "workbench", "bench", "--write-trace", trace, "--requests",
                        str(requests), "--seed", str(seed), "--components", ",".join(components)],
                       check=True, capture_output=True)
        written = sum(1 for _ in open(trace, "rb")) - 1
        emit(f"wrote {written:,} steps ({os.path.getsize(trace) / 1e6:,.0f} MB); checking them into a store")
        started = time.perf_counter()
        child = subprocess.run([sys.executable, "-m", "workbench.bench.store", "--run", trace, store],
                               capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if child.returncode != 0:
            raise RuntimeError(f"urc run --store failed: {child.stderr.strip()}")
        peak = json.loads(child.stdout.strip().splitlines()[-1])["peak_rss_mb"]
        emit(f"checked in {seconds:,.1f} s; reopening")
        reopens = [_reopen(store, seed) for _ in range(2)]
        reopen = {**reopens[0], "reopen_again_seconds": reopens[1]["reopen_seconds"],  # the files cached by then
                  "reopen_again_process_seconds": reopens[1]["reopen_process_seconds"],
                  "workbench_first_paint_seconds": _first_paint(store)}
        return {
            "steps": written,
            "components": "+".join(components),
            "trace_mb": round(os.path.getsize(trace) / 1e6),
            "run_seconds": round(seconds, 1),
            "ms_per_step": round(seconds * 1e3 / written, 3),
            "peak_rss_mb": peak,
            "store_mb": round(os.path.getsize(store) / 1e6),
            **reopen,
        }


def _reopen(store: str, seed: int) -> dict:
    """One reopening in a fresh interpreter; ``reopen_process_seconds`` is what a user
    waits for: the whole process (start, imports, opening, the last step shown, exit)
    but the jumps."""
    started = time.perf_counter()
    child = subprocess.run([sys.executable, "-m", "workbench.bench.store", store, str(seed)],
                           capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    figures = json.loads(child.stdout)
    figures["reopen_process_seconds"] = round(wall - figures.pop("jumps_seconds"), 2)
    return figures


def _first_paint(store: str) -> float:
    """``urc tui RUN.urcdb`` as a user waits for it: a fresh interpreter, from its start
    to the workbench's first screen on the store's first step (Textual's Pilot on a
    headless 160x50 screen), imports included."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "workbench.bench.store", "--tui", store], capture_output=True, check=True)
    return round(time.perf_counter() - started, 2)


async def _paint_once(path: str) -> None:
    from ..model.timeline.stored import open_store
    from ..tui.app import WorkbenchApp
    from ..tui.widgets.step_list import StepList

    app = WorkbenchApp([open_store(path)])
    async with app.run_test(size=(160, 50)) as pilot:
        while app.query_one(StepList).option_count < 2:
            await pilot.pause(0.005)
        await pilot.pause()
        app.exit()


def reopen_figures(path: str, seed: int) -> dict:
    """Open a store cold, show its last step, then jump around it. The reopening
    includes importing the model (not torch: a stored run's readers never need it)."""
    started = time.perf_counter()
    from ..model.debugging.cursor import TimelineCursor
    from ..model.timeline.stored import open_store

    imported = time.perf_counter()
    timeline = open_store(path)
    cursor = TimelineCursor([timeline])
    cursor.last()
    cursor.view().state.nodes  # the last step's tree, as the tree panel reads it
    cursor.diff()
    opened = time.perf_counter() - started
    own = time.perf_counter() - imported
    rng = random.Random(seed)
    jumps = []
    for _ in range(JUMPS):
        target = rng.randrange(len(timeline) + 1)
        began = time.perf_counter()
        cursor.go(target)
        cursor.view()
        cursor.diff()
        jumps.append(time.perf_counter() - began)
    jumping = sum(jumps)
    jumps.sort()
    return {"reopen_seconds": round(opened, 2), "jumps_seconds": jumping,
            "reopen_without_imports_ms": round(own * 1e3, 1), "jumps": JUMPS,
            "jump_ms_median": round(jumps[len(jumps) // 2] * 1e3, 1), "jump_ms_max": round(jumps[-1] * 1e3, 1)}


def run_and_peak(trace: str, store: str) -> dict:
    """What ``urc run TRACE --store STORE`` does (the model's ``run_to_store``), here,
    and this process's peak resident memory (``VmHWM``: its own, not a parent's
    high-water mark that a fork would carry)."""
    from ..model.timeline.store_run import run_to_store

    timeline = run_to_store(trace, store)
    try:
        code = 0 if timeline.passed else 1
    finally:
        timeline.close()
    with open("/proc/self/status") as status:
        peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    return {"exit": code, "peak_rss_mb": round(peak_kb / 1024)}


if __name__ == "__main__":
    if sys.argv[1] == "--run":
        print(json.dumps(run_and_peak(sys.argv[2], sys.argv[3])))
    elif sys.argv[1] == "--tui":
        import asyncio

        asyncio.run(_paint_once(sys.argv[2]))
    else:
        print(json.dumps(reopen_figures(sys.argv[1], int(sys.argv[2]))))
