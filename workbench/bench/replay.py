"""Replay a scenario or trace timing the caller's path (``urc bench --trace``).

Each public cache call a step makes is timed where it is made, outermost call only,
under ``../shared/oracle/trace_timer.py``'s op names (match, insert, evict, lock,
unlock; ``evict`` counts every eviction, the ones allocation triggers included), so
the two reports divide op by op. A match or insert step's caller also builds the
key from the step's tokens, held as SGLang's scheduler holds them (``array('q')``,
``keys="array"``) or as a list (``keys="list"``): the caller's path is that plus the
call (``mean_us``/``p50_us``/``p99_us``); ``call_mean_us`` is the call alone. Allocation,
KV writes, checks and fingerprints are timed by neither. ``floor`` is the same
trace's match and insert steps on the bare-tree floor (bench_floor.py).

A JSONL trace is read one line at a time, each step parsed just before it runs, as
trace_timer.py does: both sides then build from a freshly parsed token list (a list
parsed long before is cold in the CPU caches and costs twice as much to read).
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from array import array
from collections.abc import Iterator
from pathlib import Path

from cache import CacheError, RadixKey

from .synthetic import stats
from .floor import floor_timed
from ..model import ops
from ..model.timeline.runner import build_cache
from ..model.scenarios.fields import COMMON_FIELDS
from ..model.scenarios.scenario import Scenario, load_scenario
from ..model.timeline.driver import CacheDriver

# cache method -> the op it is timed under (trace_timer.py reports the same names): the
# calls each op records, from the ops' declarations
TIMED_CALLS = ops.timed_calls()
# ops whose caller builds a key before its call: that time is the caller's too
KEYED_STEPS = {spec.name for spec in ops.all_ops() if spec.records and spec.field("key") is not None}
KEY_CONTAINERS = ("array", "list")  # array('q'), what SGLang's scheduler holds (Req.origin_input_ids), or a list


class CallTimer:
    """Times the outermost public calls on one cache instance (nested ones, e.g. the
    eviction inside an allocation inside an insert, belong to their caller)."""

    def __init__(self, cache, calls: dict[str, str] = TIMED_CALLS) -> None:
        self.samples: dict[str, list[int]] = {}
        self._depth = 0
        for method, op in calls.items():
            if hasattr(cache, method):  # ours has no release_swa (its name is release_window)
                setattr(cache, method, self._timed(getattr(cache, method), op))

    def _timed(self, call, op: str):
        clock = time.perf_counter_ns
        samples = self.samples.setdefault(op, [])

        def timed(*args, **kwargs):
            self._depth += 1
            start = clock()
            try:
                return call(*args, **kwargs)
            finally:
                elapsed = clock() - start
                self._depth -= 1
                if self._depth == 0:
                    samples.append(elapsed)

        return timed


def replay_timed(scenario: Scenario | str | Path, device: str | None = None, keys: str = "array") -> dict:
    if keys not in KEY_CONTAINERS:
        raise ValueError(f"keys must be one of {KEY_CONTAINERS} (got {keys!r})")
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    gc.collect()
    gc.freeze()  # what was loaded before the replay is never the cyclic GC's work in it
    cache = build_cache(scenario, device if device != "cpu" else None)
    cache.fingerprints = False  # time the cache, not the stand-in for the model's KV writes
    timer = CallTimer(cache)
    driver = CacheDriver(cache)
    built_ns: dict[str, dict[int, int]] = {}  # op -> sample index -> ns spent building its key
    errors = 0
    clock = time.perf_counter_ns
    for op, fields in _steps(scenario):
        keyed = op if op in KEYED_STEPS else None
        if keyed is not None and keys == "array" and "key" in fields:  # held so before the caller's path
            fields = {**fields, "key": array("q", fields["key"])}
        if keyed is not None:  # what the caller does first: a key from its tokens
            start = clock()
            RadixKey(fields["key"], fields.get("extra_key"))
            key_ns = clock() - start
            before = len(timer.samples.get(keyed, ()))
        try:
            driver.run(op, fields)
        except CacheError:
            errors += 1
        if keyed is not None and len(timer.samples[keyed]) > before:
            built_ns.setdefault(keyed, {})[before] = key_ns
    ops = {}
    for op, calls in timer.samples.items():
        if not calls:
            continue
        built = built_ns.get(op, {})
        caller = [ns + built.get(i, 0) for i, ns in enumerate(calls)]
        ops[op] = {**stats(caller), "call_mean_us": round(statistics.fmean(calls) / 1000, 2)}
    floor = floor_timed(_steps(scenario))
    gc.unfreeze()
    return {"file": scenario.path, "steps": len(scenario.steps), "keys": keys, "errors": errors, "ops": ops,
            "floor": floor}


def _steps(scenario: Scenario) -> Iterator[tuple[str, dict]]:
    """Each step's op and fields; for a JSONL file (checked whole when it was loaded),
    parsed from its line as it comes and not kept, as trace_timer.py does."""
    path = Path(scenario.path)
    if path.suffix != ".jsonl" or not path.is_file():
        yield from ((step.op, step.fields) for step in scenario.steps)
        return
    with path.open(encoding="utf-8") as lines:
        next(lines)  # the header
        for line in lines:
            if line.strip():
                raw = json.loads(line)
                yield raw["op"], {k: v for k, v in raw.items() if k not in COMMON_FIELDS}
