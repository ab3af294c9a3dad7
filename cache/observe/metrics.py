"""Running totals of what the cache did, in tokens: hits and misses by tier, and per
component its evictions and its traffic between tiers.

SGLang 0.5.23 keeps such numbers in Prometheus collectors beside the cache (the
scheduler's hit rate, ``RadixCacheMetricsCollector``, ``StorageMetricsCollector``). Ours
are plain counters the cache bumps where the thing happens, not derived from the event
stream (which is off when nobody observes), so a scenario can expect them and a view
can show them whatever is watching. ``reset()`` of the cache starts them again.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable

# hits and misses of every match_prefix (the controller's and those a request flow makes):
# device_hit = the matched device prefix, host_hit = what a load-back could add, miss = the rest
MATCH_FIELDS = ("matches", "device_hit_tokens", "host_hit_tokens", "miss_tokens")
# per component, "<component>_<field>", in tokens (Mamba: states): device data freed by
# capacity eviction (a demotion to host included), copies device -> host (backed_up) and
# host -> device (loaded), host copies freed (host_evicted). "_total" keeps them apart from
# an op's own result (the evict op's full_evicted is what that call evicted)
COMPONENT_FIELDS = ("evicted_total", "backed_up_total", "loaded_total", "host_evicted_total")
# the storage tier: pages written, and refused or failed, by the backend; tokens a prefetch
# found in storage (and took host slots for), and tokens it put on the host
STORAGE_FIELDS = ("stored_pages_total", "store_failed_pages_total", "storage_hit_tokens", "prefetched_tokens")


def metric_fields(components: Iterable[str]) -> tuple[str, ...]:
    """Every metric a cache with these components reports, in display order."""
    return _fields_for(tuple(components))


@functools.lru_cache(maxsize=64)  # read every checked step: the names are built once per component list
def _fields_for(components: tuple[str, ...]) -> tuple[str, ...]:
    return MATCH_FIELDS + tuple(f"{c}_{f}" for c in components for f in COMPONENT_FIELDS) + STORAGE_FIELDS


class CacheMetrics:
    """Counters by name; a name never bumped reads 0. The four every match bumps (the
    tree counts them, ``count_match``) are plain attributes, not a Counter's items."""

    __slots__ = ("counts", *MATCH_FIELDS)

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.reset()

    def add(self, name: str, tokens: int) -> None:
        if tokens:
            self.counts[name] += tokens

    def count_match(self, key_len: int, device: int, host: int) -> None:
        self.matches += 1
        self.device_hit_tokens += device
        self.host_hit_tokens += host
        miss = key_len - device - host
        if miss > 0:
            self.miss_tokens += miss

    def reset(self) -> None:
        self.counts.clear()
        for name in MATCH_FIELDS:
            setattr(self, name, 0)

    def as_dict(self, components: Iterable[str]) -> dict[str, int]:
        """Every field of ``metric_fields`` with its count (0 where none happened)."""
        out = {name: getattr(self, name) for name in MATCH_FIELDS}  # metric_fields starts with them
        counts = self.counts
        for name in metric_fields(components)[len(MATCH_FIELDS):]:
            out[name] = counts.get(name, 0)
        return out
