"""A readable re-implementation of SGLang's Unified Radix Cache on torch pools.

Three layers: the controller (``UnifiedRadixCache``, pool I/O and request flows), the
tree core (``UnifiedTreeCore``, decisions) and components (``cache.components``, one
file per kind of cache data).
"""

import importlib

# name -> submodule; resolved on first use so that ``import cache.config.cache_config`` (checking a
# scenario before anything runs) does not pay for importing torch
_EXPORTS = {
    "CacheConfig": "config.cache_config",
    "UnifiedRadixCache": "controller.unified_radix_cache",
    "CacheError": "basics.errors",
    **dict.fromkeys(("Cause", "Event", "EventBus", "EventKind", "EventLog"), "observe.events"),
    **dict.fromkeys(("check_invariants", "verify_match"), "checks.invariants"),
    "Violation": "basics.violation",
    "RadixKey": "basics.keys",
    **dict.fromkeys(
        ("DecLockRefParams", "EvictParams", "EvictResult", "IncLockRefResult", "InsertParams", "InsertResult",
         "MatchPrefixParams", "MatchResult"),
        "basics.params",
    ),
    "Req": "basics.request",
    **dict.fromkeys(("CacheSnapshot", "take_snapshot"), "controller.snapshot"),
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "CacheConfig",
    "CacheError",
    "CacheSnapshot",
    "Cause",
    "DecLockRefParams",
    "Event",
    "EventBus",
    "EventKind",
    "EventLog",
    "EvictParams",
    "EvictResult",
    "IncLockRefResult",
    "InsertParams",
    "InsertResult",
    "MatchPrefixParams",
    "MatchResult",
    "RadixKey",
    "Req",
    "UnifiedRadixCache",
    "Violation",
    "check_invariants",
    "take_snapshot",
    "verify_match",
]
