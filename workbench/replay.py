"""Replay a scenario or trace timing only the cache calls (``urc bench --trace``).

Checks and fingerprint verification are off; each step's cache work is timed and
attributed to the step's op.
"""

from __future__ import annotations

import time
from pathlib import Path

from cache import CacheError

from .bench import stats
from .model.runner import build_cache
from .model.scenario import Scenario, load_scenario
from .model.session import Session


def replay_timed(scenario: Scenario | str | Path, device: str | None = None) -> dict:
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    cache = build_cache(scenario, device if device != "cpu" else None)
    cache.fingerprints = False  # time the cache, not the stand-in for the model's KV writes
    session = Session(cache)
    samples: dict[str, list[int]] = {}
    errors = 0
    pc = time.perf_counter_ns
    for step in scenario.steps:
        if step.op == "check":
            continue
        t0 = pc()
        try:
            session.run(step.op, step.fields)
        except CacheError:
            errors += 1
        samples.setdefault(step.op, []).append(pc() - t0)
    return {"file": scenario.path, "steps": len(scenario.steps), "errors": errors, "ops": {op: stats(v) for op, v in samples.items()}}
