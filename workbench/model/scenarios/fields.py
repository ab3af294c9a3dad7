"""The scenario schema's tables (schema 1): the state fields a step may expect, and the
config and scenario fields. ``scenario`` checks files against them; the TUI's live ops
and completion read them too. Ops are declared in ``ops/``."""

from __future__ import annotations

from ..ops.spec import sglang_components

# The ops themselves, their fields and results, are declared in ``ops/``.
HOST_SUFFIXES = ("available", "total", "evictable")  # "<component>_host_<suffix>": a host pool's counters
# State fields of the host tier (only with [config] hicache): host-only nodes, and nodes in
# a copy held in flight (transfers = "held") until a flush
HOST_NODE_FIELDS = ("host_nodes", "in_flight_nodes")
# State fields of the storage tier (only with [config] hicache.storage): the pages it holds,
# and the stores queued and not yet acknowledged
STORAGE_STATE_FIELDS = ("stored_pages", "stores_in_flight")
COMMON_FIELDS = ("op", "expect", "expect_error", "description")

# State fields any step may expect (all ints). Per-name tables come after.
STATE_FIELDS = tuple(
    f"{c}_{k}" for c in sglang_components() for k in ("evictable", "protected", "available", "held", "total")
) + (
    "nodes",
    "swa_tombstones",
    "mamba_tombstones",
    "evictable_leaves",
    "requests",
)
# Per node (value lengths, lock_refs, LRU and eviction orders): node_fields.py; per request:
# request_fields.py; session state (sessions_open, ...): session_fields.py
CONFIG_FIELDS = {
    "components": list,
    "page_size": int,
    "kv_size": int,
    "sliding_window": int,
    "swa_kv_size": int,
    "mamba_size": int,
    "device": str,
    "faults": list,
    "auto_evict": bool,
    "hicache": dict,
    "session_radix_cache": bool,
    "enable_kv_cache_events": bool,  # SGLang's KV event stream, checked by a router's view (kv_router.py)
    "is_eagle": bool,  # EAGLE bigram keys (CacheConfig.is_eagle)
    "eviction_policy": str,
    "eviction_policy_config": dict,
}
SCENARIO_FIELDS = {"name": str, "description": str, "source": str}
# Any other listed component gets the same per-component fields: "<component>_<suffix>"
COMPONENT_COUNTERS = ("evictable", "protected", "available", "held", "total", "tombstones")


def metric_field(key: str, components) -> bool:
    """Whether ``key`` is one of the cache's running totals (cache/observe/metrics.py) with
    these components: ``device_hit_tokens``, ``full_evicted``, ``stored_pages`` …"""
    from cache.observe.metrics import metric_fields

    return key in metric_fields(components)


def host_state_field(key: str) -> bool:
    """Whether ``key`` is a host-tier state field (``swa_host_available``, ``host_nodes``)."""
    if key in HOST_NODE_FIELDS or key in STORAGE_STATE_FIELDS:
        return True
    head, _, suffix = key.partition("_host_")
    return bool(head) and suffix in HOST_SUFFIXES
