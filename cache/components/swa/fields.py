"""SWA's own [config] fields, their defaults and the rule each value must meet, free
of torch: the config checks a given value by ``check`` when it is made (so a bad one
is refused before a cache is built), and the component resolves it by the same rule."""

from __future__ import annotations

from typing import Any

from ..field_rules import flag

# the model options: a draft's wider read (the tree keeps max(window, draft)), whether a
# SWA tombstone ends a match, SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS
# the model fields of CacheConfig this component cannot do without: the window every SWA decision reads
REQUIRED = ("sliding_window",)

FIELDS = {"swa_draft_window": 0, "swa_gates_prefix_match": True, "swa_free_out_of_window": True}


def check(field: str, value: Any, page_size: int) -> Any:
    """``value`` for ``field`` (one of ``FIELDS``), checked: the value the cache uses."""
    if field == "swa_draft_window":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"swa_draft_window must be a non-negative int (got {value!r})")
        return value
    return flag(field, value)
