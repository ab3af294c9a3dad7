"""The scenario schema's tables (schema 1): every op with its fields and results, the
state fields a step may expect, and the config and scenario fields. ``scenario``
checks files against them; the TUI's live ops and completion read them too."""

from __future__ import annotations

from cache.host_config import host_components

HOST_PARTS = host_components()  # Full and every registered component with a host part

# op -> (required fields, optional fields, result fields)
OPS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "insert": (("key",), ("as", "swa_evicted_seqlen", "extra_key"), ("prefix_len",)),
    "match": (("key",), ("as", "extra_key"), ("prefix_len", "host_hit_length", "swa_host_hit_length",
                                              "mamba_host_hit_length", "mamba_branching_seqlen")),
    "lock": (("match", "as"), (), ()),
    "unlock": (("lock",), (), ()),
    "release_window": (("lock",), (), ()),
    "evict": ((), ("full", "swa", "mamba"), ("full_evicted", "swa_evicted", "mamba_evicted")),
    "req_prefill": (("req", "tokens"), (), ("prefix_len",)),
    "req_decode": (("req", "tokens"), ("slide_window",), ()),
    "req_chunk": (("req",), (), ()),
    "req_finish": (("req",), ("insert",), ()),
    "check": ((), (), ()),
    # the host tier ([config] hicache)
    "load_back": (("key",), ("extra_key", "mem_quota"), ("loaded", "host_hit_length")),
    "evict_host": ((), HOST_PARTS, tuple(f"{c}_host_evicted" for c in HOST_PARTS)),
    "flush": ((), (), ("completed",)),
}
HOST_OPS = ("load_back", "evict_host", "flush")
# State fields of the host tier (only with [config] hicache): its pool, host-only nodes,
# and nodes in a copy held in flight (transfers = "held") until a flush
HOST_FIELDS = tuple(f"{c}_host_{k}" for c in HOST_PARTS for k in ("available", "total", "evictable")) + (
    "host_nodes", "in_flight_nodes")
COMMON_FIELDS = ("op", "expect", "expect_error", "description")
# fields one component reports (the scenario must list it)
OWNED_FIELDS = {f: f.split("_")[0] for f in ("mamba_branching_seqlen", "mamba_host_hit_length", "swa_host_hit_length",
                                             *OPS["evict_host"][2], *HOST_FIELDS)
                if f.split("_")[0] in HOST_PARTS[1:]}

# State fields any step may expect (all ints). Per-name tables come after.
STATE_FIELDS = tuple(
    f"{c}_{k}" for c in ("full", "swa", "mamba") for k in ("evictable", "protected", "available", "held", "total")
) + (
    "nodes",
    "swa_tombstones",
    "mamba_tombstones",
    "evictable_leaves",
    "requests",
)
# Lists of node ids: a component's LRU order, most recent first (Full: by access time)
ORDER_FIELDS = ("full_lru", "swa_lru", "mamba_lru")
# {match name: int}: the lock_ref of that match's last node, per component
NAMED_FIELDS = ("full_lock_ref", "swa_lock_ref", "mamba_lock_ref")
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
}
SCENARIO_FIELDS = {"name": str, "description": str, "source": str}
# Any other listed component gets the same per-component fields: "<component>_<suffix>"
COMPONENT_COUNTERS = ("evictable", "protected", "available", "held", "total", "tombstones")
