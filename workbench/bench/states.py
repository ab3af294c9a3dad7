"""``urc bench --states``: what ``urc run --json --states`` writes and how long it takes,
beside the whole-state form (``--full-states``) and the report alone (``--json``).

Each run is ``urc run`` in its own interpreter, as a user runs it, start-up included,
its standard output read through a pipe and counted (the whole-state form of the
2,000-request trace is 9.8 GB: counted, never kept). The whole-state form runs on the
trace's first ``full_steps`` steps (all of them when that is more); the changes are
also timed on those steps, for a like-for-like pair. Last, the reader: ``state_at``
on the written file at steps spread over it, in this process.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

JUMPS = 8


def states_report(requests: int, full_steps: int, components: tuple[str, ...], seed: int = 0,
                  emit: Callable[[str], None] = lambda line: None) -> dict:
    from ..model.timeline.state_deltas_read import state_at

    with tempfile.TemporaryDirectory(prefix="urc-bench-states-") as folder:
        trace, head, written = (os.path.join(folder, name) for name in ("trace.jsonl", "head.jsonl", "states.jsonl"))
        subprocess.run([sys.executable, "-m", "workbench", "bench", "--write-trace", trace, "--requests",
                        str(requests), "--seed", str(seed), "--components", ",".join(components)],
                       check=True, capture_output=True)
        with open(trace, "rb") as source, open(head, "wb") as out:
            for n, line in enumerate(source):
                if n > full_steps:
                    break
                out.write(line)
        steps = sum(1 for _ in open(trace, "rb")) - 1
        full_steps = min(full_steps, steps)
        report: dict = {"trace": {"steps": steps, "components": "+".join(components)}}
        emit(f"{steps:,} steps: urc run --json (the report alone)")
        report["json"] = _run(trace, "--json")
        emit("urc run --json --states (each step's changes)")
        report["states"] = _run(trace, "--json", "--states", keep=written)
        emit(f"the first {full_steps:,} steps, --states and --full-states (each step whole)")
        report[f"states_first_{full_steps}"] = _run(head, "--json", "--states")
        report[f"full_states_first_{full_steps}"] = _run(head, "--json", "--full-states")
        picks = sorted(random.Random(seed).sample(range(steps + 1), min(JUMPS, steps + 1)))
        times = []
        for step in picks:
            started = time.perf_counter()
            state_at(written, step)
            times.append(time.perf_counter() - started)
        report["state_at"] = {"steps": picks, "mean_ms": round(sum(times) * 1e3 / len(times), 1),
                              "max_ms": round(max(times) * 1e3, 1)}
        return report


def _run(trace: str, *flags: str, keep: str | None = None) -> dict:
    """``urc run TRACE FLAGS``: the seconds it took and the bytes it wrote (kept in ``keep``)."""
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "workbench", "run", trace, *flags], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
    written = 0
    with open(keep or os.devnull, "wb") as out:
        while chunk := child.stdout.read(1 << 20):
            written += len(chunk)
            if keep:
                out.write(chunk)
    code = child.wait()
    if code not in (0, 1):
        raise RuntimeError(f"urc run {' '.join(flags)} exited {code}")
    return {"seconds": round(time.perf_counter() - started, 1), "mb": round(written / 1e6, 1), "bytes": written}
