"""A readable re-implementation of SGLang's Unified Radix Cache on torch pools.

Three layers: the controller (``UnifiedRadixCache``, pool I/O and request flows), the
tree core (``UnifiedTreeCore``, decisions) and components (``cache.components``, one
file per kind of cache data).
"""

from .config import CacheConfig
from .controller import UnifiedRadixCache
from .errors import CacheError
from .events import Cause, Event, EventBus, EventKind, EventLog
from .invariants import Violation, check_invariants, verify_match
from .keys import RadixKey
from .params import (
    DecLockRefParams,
    EvictParams,
    EvictResult,
    IncLockRefResult,
    InsertParams,
    InsertResult,
    MatchPrefixParams,
    MatchResult,
)
from .request import Req
from .snapshot import CacheSnapshot, take_snapshot

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
