"""The timeline's states: every step's state, stored as what the step changed.

Design (chosen over structural sharing of whole snapshots and over re-execution):
per step the store keeps the records of the nodes the step touched (a deleted node
as ``None``) and one small global record (pools, requests, op counter). Every
``keyframe_every`` steps — or sooner, once the changes since the last keyframe add up
to the tree's size — it also keeps a full ``{id: record}`` map. ``state(i)`` copies
the nearest keyframe at or before ``i`` and replays at most ``keyframe_every`` deltas,
so it costs O(tree) in C-level dict copies plus O(changes), never O(steps); records
are immutable and shared by every state they belong to, and a key is the tree's own
packed bytes, stored once however many steps show it. Re-execution was rejected
because it would rebuild torch pools to look at the past, and per-node ranks are not
stored at all (an LRU move would change every node's rank): they follow from the
records' access times and LRU labels when a state is read.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import weakref
from collections.abc import Mapping
from types import MappingProxyType
from typing import Optional

from cache.basics.keys import namespace_order, unpack_tokens
from cache.observe.views import CacheSnapshot, ComponentView, GlobalRecord, NodeRecord, NodeView
from cache.controller.snapshot import eviction_order

from .packed import PackedTokens
from ..ops.spec import BASE

Records = dict[int, NodeRecord]
Delta = dict[int, Optional[NodeRecord]]
KEYFRAME_EVERY = 64  # chosen by measurement: see README "The timeline at scale"


@dataclasses.dataclass(frozen=True)
class StateShape:
    """What every state of one cache shares."""

    components: tuple[str, ...]
    page_size: int
    root_id: int
    lru_components: tuple[str, ...]  # components that keep an LRU list (Full orders by access time),
    # then the host tier's host LRUs, named "<component>_host"
    eviction_policy: str = "lru"  # Full's (CacheSnapshot.eviction_policy)
    child_keys: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
    order_keys: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
    # node id -> (record, its sort key among siblings / in each LRU order): records are
    # immutable and shared by every state, so a state reached by a jump sorts without
    # recomputing keys

    @property
    def order_names(self) -> tuple[str, ...]:
        """The LRU orders a state sorts: Full's access order, then each listed LRU."""
        return tuple(dict.fromkeys((BASE, *self.lru_components)))

    @classmethod
    def of(cls, cache) -> StateShape:
        host = tuple(f"{name}_host" for name in getattr(cache.tree, "host_lru", {}))
        return cls(tuple(c.name for c in cache.components), cache.page_size, cache.tree.root.id,
                   tuple(cache.tree.lru) + host, cache.tree.eviction_policy.label())


class StateStore:
    """Append-only: ``append`` a step's delta; ``state(i)`` gives the state after step i."""

    def __init__(self, shape: StateShape, initial: Records, initial_globals: GlobalRecord,
                 keyframe_every: int = KEYFRAME_EVERY) -> None:
        self.shape = shape
        self.keyframe_every = keyframe_every
        self.current: Records = dict(initial)  # the latest state, kept live
        self.deltas: list[Delta] = [{}]  # deltas[i]: what step i changed (0: nothing)
        self.befores: list[Delta] = [{}]  # befores[i]: those nodes' records before step i (to step back)
        self.globals: list[GlobalRecord] = [initial_globals]
        self.keyframes: dict[int, Records] = {0: dict(initial)}
        self._keyframe_steps = [0]
        self._since_keyframe = 0
        self._cache: dict[int, TimelineState] = {}

    def __len__(self) -> int:
        return len(self.deltas) - 1

    def append(self, delta: Delta, globals_: GlobalRecord) -> None:
        current = self.current
        self.befores.append({node_id: current.get(node_id) for node_id in delta})
        apply_delta(current, delta)
        self.deltas.append(delta)
        self.globals.append(globals_)
        self._since_keyframe += len(delta) + 1
        index = len(self.deltas) - 1
        if index % self.keyframe_every == 0 or self._since_keyframe > len(current):
            self.keyframes[index] = dict(current)
            self._keyframe_steps.append(index)
            self._since_keyframe = 0

    def state(self, index: int) -> TimelineState:
        """The state after step ``index``: from a neighbour read just before (one delta,
        forward or back, with its derived indexes patched) or from the nearest keyframe."""
        index = max(0, min(index, len(self)))
        cached = self._cache.get(index)
        if cached is not None:
            return cached
        after, before = self._cache.get(index - 1), self._cache.get(index + 1)
        if after is not None:  # one step forward
            state = after.derive(self.deltas[index], self.befores[index], self.globals[index])
        elif before is not None:  # one step back
            state = before.derive(self.befores[index + 1], self.deltas[index + 1], self.globals[index])
        else:
            records = dict(self.current) if index == len(self) else self._rebuild(index)
            state = TimelineState(self.shape, records, self.globals[index])
        if len(self._cache) >= 4:
            self._cache.pop(next(iter(self._cache)))
        self._cache[index] = state
        return state


    def _rebuild(self, index: int) -> Records:
        """The records after step ``index``: the nearest keyframe, then the deltas since."""
        start = self._keyframe_steps[bisect.bisect_right(self._keyframe_steps, index) - 1]
        records = dict(self.keyframes[start])
        for i in range(start + 1, index + 1):
            apply_delta(records, self.deltas[i])
        return records


def apply_delta(records: Records, delta: Delta) -> None:
    """Apply a step's delta (a record, or None for a node that left) to ``records``."""
    for node_id, record in delta.items():
        if record is None:
            records.pop(node_id, None)
        else:
            records[node_id] = record


class TimelineState:
    """The state after one step, read like a ``CacheSnapshot``: O(1) ``node(id)``;
    children, ranks and paths are derived on first use and kept."""

    def __init__(self, shape: StateShape, records: Records, globals_: GlobalRecord) -> None:
        self.shape = shape
        self.components = shape.components
        self.page_size = shape.page_size
        self.root_id = shape.root_id
        self.page_bytes = 4 * shape.page_size
        self.records = records
        self.globals = globals_
        self._children: Optional[dict[int, list[NodeRecord]]] = None  # parent -> children, sorted
        self._child_ids: dict[int, tuple[int, ...]] = {}  # parent -> children's ids, as asked for
        self._neighbour: Optional[tuple] = None  # (weakref to the state derived from, delta, undo)
        self._orders: Optional[dict[str, list[tuple]]] = None  # component -> sorted (order key, id)
        self._lru: Optional[Mapping[str, tuple[int, ...]]] = None
        self._paths: dict[int, tuple[int, ...]] = {}
        self._views: dict[int, NodeView] = {}
        self._nodes: Optional[tuple[NodeView, ...]] = None

    # ---- the CacheSnapshot interface ---------------------------------------------------------
    @property
    def op_seq(self) -> int:
        return self.globals.op_seq

    @property
    def pools(self):
        return self.globals.pools

    @property
    def requests(self):
        return self.globals.requests

    @property
    def metrics(self):
        return self.globals.metrics

    @property
    def sessions(self):
        return self.globals.sessions

    @property
    def streaming_sessions(self):
        return self.globals.streaming_sessions

    @property
    def storage(self):
        return self.globals.storage

    @property
    def root(self) -> NodeView:
        return self.node(self.root_id)

    def __contains__(self, node_id: int) -> bool:
        return node_id in self.records

    def node(self, node_id: int) -> NodeView:
        view = self._views.get(node_id)
        if view is None:
            record = self.records.get(node_id)
            if record is None:
                raise KeyError(f"node {node_id} not in this state")
            view = self._views[node_id] = self._view(record)
        return view

    def record(self, node_id: int) -> Optional[NodeRecord]:
        return self.records.get(node_id)

    def children(self, node_id: int) -> tuple[int, ...]:
        if self._children is None:
            self._children = self._patched_children()
        if self._children is None:
            kids: dict[int, list[NodeRecord]] = {}
            for record in self.records.values():
                if record.parent is not None:
                    kids.setdefault(record.parent, []).append(record)
            order = self._child_key
            for rs in kids.values():
                rs.sort(key=order)
            self._children = kids
        ids = self._child_ids.get(node_id)
        if ids is None:
            ids = self._child_ids[node_id] = tuple(r.id for r in self._children.get(node_id, ()))
        return ids

    def derive(self, delta: Delta, undo: Delta, globals_: GlobalRecord) -> TimelineState:
        """The neighbouring state that ``delta`` leads to (``undo`` holds the same nodes'
        records here): records copied; its children and LRU indexes, when first asked
        for, are patched from this state's if it has built them by then (a jump reads
        the step, then the one before for the diff), else built."""
        records = dict(self.records)
        apply_delta(records, delta)
        state = TimelineState(self.shape, records, globals_)
        state._neighbour = (weakref.ref(self), delta, undo)
        return state

    def _neighbour_with(self, index: str) -> Optional[tuple]:
        """(neighbour, delta, undo) when the state this one was derived from is still
        alive and has built ``index`` (its ``_children`` or ``_orders``), else None."""
        if self._neighbour is None:
            return None
        ref, delta, undo = self._neighbour
        source = ref()
        return None if source is None or getattr(source, index) is None else (source, delta, undo)

    def _patched_children(self) -> Optional[dict[int, list[NodeRecord]]]:
        found = self._neighbour_with("_children")
        if found is None:
            return None
        source, delta, undo = found
        kids = dict(source._children)
        touched: dict[int, list[NodeRecord]] = {}
        for node_id, new in delta.items():
            old = undo.get(node_id)
            for record, add in ((old, False), (new, True)):
                if record is None or record.parent is None:
                    continue
                siblings = touched.get(record.parent)
                if siblings is None:
                    siblings = touched[record.parent] = kids[record.parent] = list(kids.get(record.parent, ()))
                if add:
                    bisect.insort(siblings, record, key=self._child_key)
                else:
                    siblings.remove(record)
        return kids

    def _patched_orders(self) -> Optional[dict[str, list[tuple]]]:
        found = self._neighbour_with("_orders")
        if found is None:
            return None
        source, delta, undo = found
        orders = {name: list(entries) for name, entries in source._orders.items()}
        for node_id, new in delta.items():
            old = undo.get(node_id)
            for name, entries in orders.items():
                if old is not None and (key := self.order_key(name, old)) is not None:
                    del entries[bisect.bisect_left(entries, key)]
                if new is not None and (key := self.order_key(name, new)) is not None:
                    bisect.insort(entries, key)
        return orders

    @property
    def nodes(self) -> tuple[NodeView, ...]:
        """Depth first, children by (namespace, first token), root first — as a snapshot."""
        if self._nodes is None:
            out, stack = [], [self.root_id]
            while stack:
                node_id = stack.pop()
                out.append(self.node(node_id))
                stack.extend(reversed(self.children(node_id)))
            self._nodes = tuple(out)
        return self._nodes

    def non_root(self) -> tuple[NodeView, ...]:
        return self.nodes[1:]

    @property
    def lru(self) -> Mapping[str, tuple[int, ...]]:
        if self._lru is None:
            orders = self.sorted_order_all()
            self._lru = MappingProxyType({name: tuple(i for *_, i in entries) for name, entries in orders.items()})
        return self._lru

    def order_key(self, name: str, record: NodeRecord) -> Optional[tuple]:
        """Where a record sorts in a component's LRU order (MRU first); None: not listed."""
        if record.id == self.root_id:
            return None
        if name == BASE:
            return (-record.last_access_time, record.id)
        if name.endswith("_host"):
            label = record.components[self.components.index(name.removesuffix("_host"))].host_lru_label
        else:
            label = record.components[self.components.index(name)].lru_label
        return None if label is None else (-label, record.id)

    def sorted_order(self, name: str) -> list[tuple]:
        """A component's LRU order as sorted ``(order key, id)`` entries, MRU first."""
        return self.sorted_order_all()[name]

    def sorted_order_all(self) -> dict[str, list[tuple]]:
        if self._orders is None:
            self._orders = self._patched_orders()
        if self._orders is None:
            names = self.shape.order_names
            columns = list(zip(*(self._order_keys(r, names) for r in self.records.values()))) or [()] * len(names)
            self._orders = {name: sorted(k for k in keys if k is not None) for name, keys in zip(names, columns)}
        return self._orders

    def _order_keys(self, record: NodeRecord, names: tuple[str, ...]) -> tuple:
        known = self.shape.order_keys.get(record.id)
        if known is not None and known[0] is record:
            return known[1]
        keys = tuple(self.order_key(name, record) for name in names)
        self.shape.order_keys[record.id] = (record, keys)
        return keys

    @property
    def eviction_policy(self) -> str:
        return self.shape.eviction_policy

    @property
    def evictable_leaves(self) -> tuple[int, ...]:
        return eviction_order(self.records.values())

    def tombstones(self, component: str) -> int:
        i = self.components.index(component)
        root = self.root_id
        return sum(1 for r in self.records.values() if r.id != root and r.components[i].value_len is None)

    def path(self, node_id: int) -> tuple[int, ...]:
        """Every token from the root to the end of this node (computed, then kept)."""
        path = self._paths.get(node_id)
        if path is None:
            record = self.records[node_id]
            path = () if record.parent is None else self.path(record.parent) + tuple(unpack_tokens(record.key))
            self._paths[node_id] = path
        return path

    def to_snapshot(self) -> CacheSnapshot:
        """The same state as a ``CacheSnapshot`` (for equivalence checks and old readers)."""
        return CacheSnapshot(self.op_seq, self.page_size, self.components, self.nodes, self.lru, self.evictable_leaves,
                             self.pools, self.requests, self.sessions, self.streaming_sessions,
                             self.shape.eviction_policy, self.storage, self.metrics)

    # ---- helpers -------------------------------------------------------------------------------
    def _child_key(self, record: NodeRecord):
        known = self.shape.child_keys.get(record.id)
        if known is not None and known[0] is record:
            return known[1]
        key = _child_order(record, self.page_bytes)
        self.shape.child_keys[record.id] = (record, key)
        return key

    def rank(self, name: str, record: NodeRecord) -> Optional[int]:
        """A record's LRU rank in a component (0 = most recent; None: not ranked)."""
        return self._rank(name, record)

    def _rank(self, name: str, record: NodeRecord) -> Optional[int]:
        """0 = most recently used; O(log n) from the sorted order."""
        entries = self.sorted_order_all().get(name)
        key = None if entries is None else self.order_key(name, record)
        return None if key is None else bisect.bisect_left(entries, key)

    def _view(self, record: NodeRecord) -> NodeView:
        comps = {
            name: ComponentView(c.value_len, c.lock_ref, self._rank(name, record), MappingProxyType(dict(c.extras)),
                                c.host_len, c.session_ref, c.session_ids)
            for name, c in zip(self.components, record.components)
        }
        key = PackedTokens(record.key)  # unpacked as far as a view reads it
        path = PackedTokens(functools.partial(_path_bytes, self.records, record.id))  # joined when first read
        return NodeView(
            record.id, record.parent, key, path, record.extra_key,
            record.last_access_time, record.priority, record.hit_count, record.evictable_leaf,
            self.children(record.id), MappingProxyType(comps), record.cache_salt, record.key_head,
            record.evict_key, record.evict_note,
        )


def _path_bytes(records: Records, node_id: int) -> bytes:
    """A node's path packed: its ancestors' keys and its own, root first."""
    keys = []
    record = records[node_id]
    while record.parent is not None:
        keys.append(record.key)
        record = records[record.parent]
    return b"".join(reversed(keys))


def _child_order(record: NodeRecord, page_bytes: int):
    """As the tree orders children: (namespace, first page) — siblings differ in it."""
    return (namespace_order(record.namespace), unpack_tokens(record.key[:page_bytes]))


def all_records(cache) -> Records:
    from cache.controller.snapshot import node_record

    return {node_id: node_record(cache, node_id) for node_id in cache.tree.nodes}
