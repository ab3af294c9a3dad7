"""A scenario's state fields (``full_available``, ``nodes``, ``swa_tombstones``, ...) read
off a timeline state: what expectations, breakpoints and charts compare. Reads
recorded state only, so a stored run's readers use it without the cache."""

from __future__ import annotations

from typing import Optional

from cache.observe.views import GlobalRecord

from ..scenarios.fields import STORAGE_STATE_FIELDS
from .states import TimelineState

_TREE_COUNTS = ("nodes", "evictable_leaves", "host_nodes", "in_flight_nodes")


def globals_field(globals_: GlobalRecord, key: str) -> Optional[int]:
    """A state field a step's totals hold alone (a pool or host pool counter, the
    running requests), or None for one read off the tree (nodes, tombstones, LRU
    orders): breakpoints read the former without building the step's state."""
    if key in _TREE_COUNTS or key.endswith(("_lru", "_tombstones")):
        return None
    if key == "requests":
        return len(globals_.requests)
    if key in globals_.metrics:  # full_evicted_total, device_hit_tokens, ... (cache/observe/metrics.py)
        return globals_.metrics[key]
    if key in STORAGE_STATE_FIELDS:  # the storage tier's counts
        storage = globals_.storage
        return 0 if storage is None else len(storage.keys if key == "stored_pages" else storage.in_flight)
    if "_host_" in key:  # full_host_available, mamba_host_evictable, ...
        name, _, counter = key.partition("_host_")
        pool = globals_.pools.get(f"{name}_host")
    else:
        name, _, counter = key.partition("_")
        pool = globals_.pools.get(name)
    return getattr(pool, counter) if pool is not None else 0


def state_field(state: TimelineState, key: str):
    counted = globals_field(state.globals, key)
    if counted is not None:
        return counted
    if key.endswith("_lru"):
        return list(state.lru.get(key.removesuffix("_lru"), ()))
    if key == "nodes":
        return len(state.records) - 1
    if key == "evictable_leaves":
        return len(state.evictable_leaves)
    if key == "host_nodes":
        return sum(1 for r in state.records.values() if r is not None and r.parent is not None
                   and r.components[0].value_len is None and r.components[0].host_len is not None)
    if key == "in_flight_nodes":
        return sum(1 for r in state.records.values() if r is not None and r.parent is not None
                   and any(k == "transfer" for k, _ in r.components[0].extras))
    component = key.removesuffix("_tombstones")
    return state.tombstones(component) if component in state.components else 0
