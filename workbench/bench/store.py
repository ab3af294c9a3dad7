"""``urc bench --store``: a long trace checked into a store file, then opened again.

Each part runs in its own interpreter, as a user would run it, so the peak resident
memory is the run's own (``wait4``'s rusage of that child) and reopening starts cold:
the run is ``urc run TRACE --store``; the reopening opens the store, shows its last
step and jumps to random steps, timing what a viewer pays per jump (the state, the
step's diff and the view the panels render).
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
    from ..model.scenarios.workload import write_trace

    requests = max(1, steps // 4)  # the workload's request is four steps: match, lock, insert, unlock
    with tempfile.TemporaryDirectory(prefix="urc-bench-store-") as folder:
        trace, store = os.path.join(folder, "trace.jsonl"), os.path.join(folder, "run.urcdb")
        with open(trace, "w") as stream:
            written = write_trace(stream, requests, seed, components)
        emit(f"wrote {written:,} steps ({os.path.getsize(trace) / 1e6:,.0f} MB); checking them into a store")
        started = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "workbench", "run", trace, "--store", store],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) not in (0, 1):
            raise RuntimeError(f"urc run --store failed: {child.stderr.read().decode(errors='replace').strip()}")
        child.stderr.close()
        emit(f"checked in {seconds:,.1f} s; reopening")
        opened = subprocess.run([sys.executable, "-m", "workbench.bench.store", store, str(seed)],
                                capture_output=True, text=True, check=True)
        reopen = json.loads(opened.stdout)
        return {
            "steps": written,
            "components": "+".join(components),
            "trace_mb": round(os.path.getsize(trace) / 1e6),
            "run_seconds": round(seconds, 1),
            "ms_per_step": round(seconds * 1e3 / written, 3),
            "peak_rss_mb": round(usage.ru_maxrss / 1024),
            "store_mb": round(os.path.getsize(store) / 1e6),
            **reopen,
        }


def reopen_figures(path: str, seed: int) -> dict:
    """Open a store cold, show its last step, then jump around it."""
    started = time.perf_counter()
    from ..model.timeline.cursor import TimelineCursor
    from ..model.timeline.stored import open_store

    timeline = open_store(path)
    cursor = TimelineCursor([timeline])
    cursor.last()
    cursor.view()
    opened = time.perf_counter() - started
    rng = random.Random(seed)
    jumps = []
    for _ in range(JUMPS):
        target = rng.randrange(len(timeline) + 1)
        began = time.perf_counter()
        cursor.go(target)
        cursor.view()
        cursor.diff()
        jumps.append(time.perf_counter() - began)
    jumps.sort()
    return {"reopen_seconds": round(opened, 2), "jumps": JUMPS,
            "jump_ms_median": round(jumps[len(jumps) // 2] * 1e3, 1), "jump_ms_max": round(jumps[-1] * 1e3, 1)}


if __name__ == "__main__":
    print(json.dumps(reopen_figures(sys.argv[1], int(sys.argv[2]))))
