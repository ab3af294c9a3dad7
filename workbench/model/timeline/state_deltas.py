"""``urc run --json --states``: every step's state as what changed, in JSON Lines.

The whole-state form repeats the tree after every step (0.5 MB a step on the benchmark
workload: 9.8 GB for 8,000 steps); a step changes a few nodes. So each step line holds
only the nodes, LRU places, pools and metrics that differ from the step before, and
every ``KEYFRAME_EVERY`` steps a line holds the whole state instead, so a reader that
wants step N replays at most that many deltas from the keyframe before it. Nodes are
named by id (a path is not unique across namespaces, and a key is written once, when
the node appears or changes, not with every descendant's path). The format is
docs/reference/states-format.md; ``state_deltas_read`` rebuilds the states.

The writer reads the timeline's store only: each step's touched records
(``StateStore.deltas``) and its globals, so a step costs what it changed.
"""

from __future__ import annotations

import bisect
import json
from typing import Any, Optional, TextIO

from cache.basics.keys import namespace_order, unpack_tokens
from cache.observe.views import GlobalRecord, NodeRecord

from .export import step_json
from .states import TimelineState
from .timeline import StepRecord, Timeline
from ..ops.spec import BASE

FORMAT, VERSION = "urc-states", 1
KEYFRAME_EVERY = 256  # steps between whole states: see docs/reference/states-format.md
NO_NAMESPACE = ("", "", -1)  # namespace_order(None)
POOL_COUNTERS = ("total", "available", "evictable", "protected")

Signature = tuple  # what a state line shows of a node: (parent, key bytes, ((len, lock_ref), ...), namespace order)


class StateDeltaWriter:
    """Writes one run's lines: the header (with the state before the first step), a
    line per step as the runner adds it, and the end line. The same step fields as
    ``--json`` gives, plus ``delta`` (or ``state`` on a keyframe)."""

    def __init__(self, stream: TextIO, timeline: Timeline, keyframe_every: int = KEYFRAME_EVERY) -> None:
        self.stream, self.timeline, self.keyframe_every = stream, timeline, keyframe_every
        store = timeline.store
        shape = store.shape
        self.components = shape.components
        self.root_id = shape.root_id
        self.lru_names = tuple(name for name in shape.order_names if name != BASE)
        self._keys_of = TimelineState(shape, {}, store.globals[0])  # only for ``order_key``
        self.nodes: dict[int, Signature] = {}  # every non-root node as the last line left it
        self.orders: dict[str, list[tuple]] = {name: [] for name in self.lru_names}  # sorted order keys, MRU first
        self.order_keys: dict[int, tuple] = {}  # node -> its key in each LRU order (None: not listed)
        self.pools: dict[str, dict[str, int]] = {}
        self.metrics: dict[str, int] = {}
        self.count = 0
        initial = store.state(0)
        self._take(initial.records, store.globals[0])
        scenario = timeline.scenario
        head = {"kind": "run", "format": FORMAT, "version": VERSION, "file": scenario.path,
                "scenario": scenario.name, "components": list(self.components), "page_size": shape.page_size,
                "root": self.root_id, "lru": list(self.lru_names), "keyframe_every": keyframe_every,
                "state": self._whole()}
        self._write(head)

    def step(self, record: StepRecord) -> None:
        store, index = record.store, record.index
        line = {"kind": "step", **step_json(record)}
        changes = self._take(store.deltas[index], store.globals[index])
        if index % self.keyframe_every == 0:
            line["kind"] = "keyframe"
            line["state"] = self._whole()
        else:
            line["delta"] = changes
        self._write(line)
        self.count += 1

    def close(self, interrupted: bool = False) -> None:
        tail: dict[str, Any] = {"kind": "end", "passed": self.timeline.passed, "steps": self.count}
        if interrupted:
            tail["interrupted_after_step"] = self.count
        self._write(tail)

    # ---- what changed ------------------------------------------------------------------------
    def _take(self, delta: dict[int, Optional[NodeRecord]], globals_: GlobalRecord) -> dict[str, Any]:
        """Bring the writer's copy up to this step; return what differs, as a delta line holds it."""
        out: dict[str, Any] = {}
        put, drop = [], []
        lru_moves: dict[str, tuple[list, list]] = {name: ([], []) for name in self.lru_names}
        for node_id, record in delta.items():
            if node_id == self.root_id:
                continue
            self._move_in_orders(node_id, record, lru_moves)
            if record is None:
                if self.nodes.pop(node_id, None) is not None:
                    drop.append(node_id)
                continue
            signature = (record.parent, record.key, tuple((c.value_len, c.lock_ref) for c in record.components),
                         namespace_order(record.namespace))
            if self.nodes.get(node_id) != signature:
                self.nodes[node_id] = signature
                put.append(node_id)
        if put:
            out["nodes"] = [self._node_json(i) for i in sorted(put)]
        if drop:
            out["drop"] = sorted(drop)
        lru = {}
        for name, (left, placed) in lru_moves.items():
            if left or placed:
                entries = self.orders[name]
                lru[name] = {"drop": sorted(left),
                             "put": sorted([bisect.bisect_left(entries, key), key[-1]] for key in placed)}
        if lru:
            out["lru"] = lru
        pools = self._changed_pools(globals_)
        if pools:
            out["pools"] = pools
        metrics = {k: v for k, v in globals_.metrics.items() if self.metrics.get(k) != v}
        metrics.update({k: None for k in self.metrics.keys() - globals_.metrics.keys()})
        if metrics:
            out["metrics"] = metrics
        self.metrics = dict(globals_.metrics)
        return out

    def _move_in_orders(self, node_id: int, record: Optional[NodeRecord], moves: dict) -> None:
        """Keep each LRU order's sorted keys; note the nodes whose place there changed."""
        if not self.lru_names:
            return
        old = self.order_keys.get(node_id)
        new = None if record is None else tuple(self._keys_of.order_key(name, record) for name in self.lru_names)
        if old == new:
            return
        if new is None:
            del self.order_keys[node_id]
        else:
            self.order_keys[node_id] = new
        for n, name in enumerate(self.lru_names):
            before, after = (old[n] if old else None), (new[n] if new else None)
            if before == after:
                continue
            entries = self.orders[name]
            left, placed = moves[name]
            if before is not None:
                del entries[bisect.bisect_left(entries, before)]
                left.append(node_id)
            if after is not None:
                bisect.insort(entries, after)
                placed.append(after)

    def _changed_pools(self, globals_: GlobalRecord) -> dict[str, Optional[dict[str, int]]]:
        out: dict[str, Optional[dict[str, int]]] = {}
        for name, pool in globals_.pools.items():
            counters = {c: getattr(pool, c) for c in POOL_COUNTERS}
            if self.pools.get(name) != counters:
                out[name] = self.pools[name] = counters
        for name in self.pools.keys() - globals_.pools.keys():
            out[name] = None
            del self.pools[name]
        return out

    # ---- lines -------------------------------------------------------------------------------
    def _node_json(self, node_id: int) -> dict[str, Any]:
        parent, key, components, namespace = self.nodes[node_id]
        out = {"id": node_id, "parent": parent, "key": unpack_tokens(key),
               "components": {name: {"len": length, "lock_ref": lock}
                              for name, (length, lock) in zip(self.components, components)}}
        if namespace != NO_NAMESPACE:
            out["ns"] = list(namespace)
        return out

    def _whole(self) -> dict[str, Any]:
        """The writer's state whole, as a keyframe holds it."""
        return {"nodes": [self._node_json(i) for i in sorted(self.nodes)],
                "lru": {name: [key[-1] for key in self.orders[name]] for name in self.lru_names},
                "pools": dict(self.pools), "metrics": dict(self.metrics)}

    def _write(self, line: dict[str, Any]) -> None:
        self.stream.write(json.dumps(line, separators=(",", ":")) + "\n")
