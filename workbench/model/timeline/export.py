"""Plain-data views of snapshots, events and step records (for JSON output)."""

from __future__ import annotations

import json
from typing import Any, TextIO

from cache.observe.events import Event
from cache.observe.views import CacheSnapshot

from .states import TimelineState
from .timeline import StepRecord, Timeline
from ..ops.spec import BASE


def state_json(snapshot: CacheSnapshot | TimelineState) -> dict[str, Any]:
    """Nodes depth-first (children by first token, root left out), aux LRU orders as
    paths (MRU first), per-pool counters and the running totals (cache/observe/metrics.py)."""
    all_nodes = snapshot.nodes
    paths = {n.id: list(n.path) for n in all_nodes}
    nodes = [
        {
            "path": list(n.path),
            "key": list(n.key),
            "components": {name: {"len": view.value_len, "lock_ref": view.lock_ref} for name, view in n.components.items()},
        }
        for n in all_nodes[1:]
    ]
    lru = {name: [paths[i] for i in ids] for name, ids in snapshot.lru.items() if name != BASE}
    pools = {
        name: {"total": p.total, "available": p.available, "evictable": p.evictable, "protected": p.protected}
        for name, p in snapshot.pools.items()
    }
    return {"nodes": nodes, "lru": lru, "pools": pools, "metrics": dict(snapshot.metrics)}


def event_json(event: Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "op": event.op,
        "kind": event.kind.value,
        "component": event.component,
        "node": event.node,
        "cause": event.cause.value,
        "tokens": event.tokens,
        "detail": event.detail,
        "request": event.request or None,
    }


def step_json(record: StepRecord, with_state: bool = False) -> dict[str, Any]:
    out = {
        "index": record.step.index,
        "line": record.step.line,
        "op": record.step.op,
        "result": record.result,
        "failures": [{"field": f.field, "expected": f.expected, "actual": f.actual} for f in record.failures],
        "violations": [{"name": v.name, "message": v.message} for v in record.violations],
        "events": [event_json(e) for e in record.events],
    }
    if record.error is not None:
        out["error"] = record.error
    if with_state:
        out["state"] = state_json(record.snapshot)
    return out


def timeline_json(timeline: Timeline, with_states: bool = False) -> dict[str, Any]:
    final = timeline.final
    return {
        "file": timeline.scenario.path,
        "scenario": timeline.scenario.name,
        "passed": timeline.passed,
        "steps": [step_json(r, with_states) for r in timeline.records],
        "final_state": state_json(final),
    }


class TimelineJsonWriter:
    """Writes one file's ``timeline_json`` object step by step, so a long run's report
    never sits in memory whole: the same keys as ``timeline_json``, "passed" last."""

    def __init__(self, stream: TextIO, timeline: Timeline, with_states: bool = False) -> None:
        self.stream, self.timeline, self.with_states = stream, timeline, with_states
        self.count = 0
        scenario = timeline.scenario
        head = json.dumps({"file": scenario.path, "scenario": scenario.name})
        stream.write(head[:-1] + ', "steps": [\n')

    def step(self, record: StepRecord) -> None:
        if self.count:
            self.stream.write(",\n")
        self.stream.write(json.dumps(step_json(record, self.with_states), separators=(",", ":")))
        self.count += 1

    def close(self, interrupted: bool = False) -> None:
        tail = {"passed": self.timeline.passed, "final_state": state_json(self.timeline.final)}
        if interrupted:
            tail["interrupted_after_step"] = self.count
        self.stream.write("\n], " + json.dumps(tail)[1:])
