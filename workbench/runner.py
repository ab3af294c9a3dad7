"""The headless runner: builds the cache a scenario configures, runs its steps and
checks, after every step, the invariants, the match fingerprints and the step's
expectations. It produces a ``Timeline`` and can record a JSONL trace as it goes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Optional, TextIO

from cache import CacheError, EventLog, UnifiedRadixCache, check_invariants, verify_match
from cache.snapshot import CacheSnapshot

from .scenario import NAMED_FIELDS, Scenario, ScenarioError, Step, cache_config
from .session import Session
from .timeline import Failure, StepRecord, Timeline


def build_cache(scenario: Scenario, device: Optional[str] = None) -> UnifiedRadixCache:
    """The cache a scenario's [config] describes; a config that cannot be built is a
    ScenarioError pointing at the [config] table."""
    config = cache_config(scenario, device)
    try:
        return UnifiedRadixCache(config)
    except (ValueError, TypeError, RuntimeError, MemoryError) as exc:
        raise ScenarioError(f"config cannot be built: {exc}", scenario.path, scenario.config_line) from None


class Runner:
    """Runs one scenario step by step; ``step()`` lets a UI advance one step at a time."""

    def __init__(self, scenario: Scenario, record: Optional[TextIO] = None, checks: bool = True, device: Optional[str] = None):
        self.scenario = scenario
        self.cache = build_cache(scenario, device)
        self.session = Session(self.cache)
        self.log = EventLog(self.cache.events)
        self.checks = checks
        self.record = record
        self.timeline = Timeline(scenario, self.cache.snapshot())
        self._next = 0
        if record is not None:
            _write_line(record, scenario.header())

    @property
    def done(self) -> bool:
        return self._next >= len(self.scenario.steps)

    def run(self) -> Timeline:
        while not self.done:
            self.step()
        return self.timeline

    def step(self) -> StepRecord:
        step = self.scenario.steps[self._next]
        self._next += 1
        before = self.timeline.records[-1].snapshot if self.timeline.records else self.timeline.initial
        result, error = None, None
        try:
            result = self.session.run(step.op, step.fields)
        except CacheError as exc:
            error = f"{type(exc).__name__}: {exc}"
        events = tuple(self.log.take())
        violations = list(check_invariants(self.cache)) if self.checks else []
        match = self.session.last_match
        if self.checks and match is not None:
            violations.extend(verify_match(self.cache, match.tokens, match.result))
        snapshot = self.cache.snapshot()
        failures = self._judge(step, result, error, before, snapshot)
        record = StepRecord(step, result, error, events, tuple(violations), tuple(failures), snapshot)
        self.timeline.records.append(record)
        if self.record is not None:
            _write_line(self.record, step.raw)
        return record

    def _judge(self, step: Step, result, error, before: CacheSnapshot, after: CacheSnapshot) -> list[Failure]:
        if step.expect_error is not None:
            if error is None:
                return [Failure("expect_error", step.expect_error, "the op succeeded")]
            failures = []
            if step.expect_error not in error:
                failures.append(Failure("expect_error", step.expect_error, error))
            if not same_state(before, after):
                failures.append(Failure("state", "unchanged by the failed op", "changed"))
            return failures
        if error is not None:
            return [Failure("error", None, error)]
        actual = self.observe(step.expect, result or {}, after)
        return [Failure(k, v, actual[k]) for k, v in step.expect.items() if actual[k] != v]

    def observe(self, fields: dict[str, Any], result: dict[str, Any], snap: CacheSnapshot) -> dict[str, Any]:
        """The actual value of each expected field."""
        out: dict[str, Any] = {}
        for key, want in fields.items():
            if key in NAMED_FIELDS:
                component = key.removesuffix("_lock_ref")
                out[key] = {m: self._lock_ref(snap, m, component) for m in want}
            elif key in result:
                out[key] = result[key]
            else:
                out[key] = state_field(snap, key)
        return out

    def _lock_ref(self, snap: CacheSnapshot, match: str, component: str):
        node = self.session.node_of(match)
        try:
            return snap.node(node).components[component].lock_ref
        except KeyError:
            return "node evicted"


def state_field(snap: CacheSnapshot, key: str):
    if key == "nodes":
        return len(snap.nodes) - 1
    if key == "evictable_leaves":
        return len(snap.evictable_leaves)
    if key == "requests":
        return len(snap.requests)
    if key.endswith("_tombstones"):
        component = key.removesuffix("_tombstones")
        return snap.tombstones(component) if component in snap.components else 0
    component, _, counter = key.partition("_")
    pool = snap.pools.get(component)
    return getattr(pool, counter) if pool is not None else 0


def same_state(a: CacheSnapshot, b: CacheSnapshot) -> bool:
    return dataclasses.replace(a, op_seq=0) == dataclasses.replace(b, op_seq=0)


def _write_line(stream: TextIO, obj: Any) -> None:
    stream.write(json.dumps(obj, separators=(",", ":")) + "\n")
    stream.flush()


def run_scenario(scenario: Scenario | str | Path, record: Optional[str | Path] = None, checks: bool = True) -> Timeline:
    """Library entry point: load (if given a path), run, return the timeline."""
    from .scenario import load_scenario

    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    if record is None:
        return Runner(scenario, checks=checks).run()
    with open(record, "w", encoding="utf-8") as stream:
        return Runner(scenario, record=stream, checks=checks).run()
