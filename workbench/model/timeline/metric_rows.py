"""The cache's running totals (cache/observe/metrics.py) laid out for a view: one row per group
(matches, then each component, then storage), each entry with its change this step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from cache.observe.metrics import COMPONENT_FIELDS, MATCH_FIELDS, STORAGE_FIELDS

# short labels: the panel is narrow
_LABELS = {"matches": "calls", "device_hit_tokens": "device hit", "host_hit_tokens": "host hit",
           "miss_tokens": "miss", "evicted_total": "evicted", "backed_up_total": "backed up",
           "loaded_total": "loaded", "host_evicted_total": "host evicted", "stored_pages_total": "pages stored", "store_failed_pages_total": "failed",
           "storage_hit_tokens": "hit", "prefetched_tokens": "prefetched"}


class Entry(NamedTuple):
    name: str  # the metric (what a scenario expects)
    label: str
    value: int
    delta: int  # since the step before


def metric_rows(metrics: Mapping[str, int], before: Mapping[str, int]) -> list[tuple[str, list[Entry]]]:
    """(group, entries) for every group with a count; entries that are 0 left out."""
    groups: list[tuple[str, list[tuple[str, str]]]] = [("hits", [(f, _LABELS[f]) for f in MATCH_FIELDS])]
    components = list(dict.fromkeys(name.split("_")[0] for name in metrics if name.endswith("_" + COMPONENT_FIELDS[0])))
    groups += [(c, [(f"{c}_{f}", _LABELS[f]) for f in COMPONENT_FIELDS]) for c in components]
    groups.append(("storage", [(f, _LABELS[f]) for f in STORAGE_FIELDS]))
    rows = []
    for group, fields in groups:
        entries = [Entry(name, label, metrics.get(name, 0), metrics.get(name, 0) - before.get(name, 0))
                   for name, label in fields if metrics.get(name, 0)]
        if entries:
            rows.append((group, entries))
    return rows


def metric_changes(metrics: Mapping[str, int], before: Mapping[str, int]) -> str:
    """What this step added, as ``full_evicted 8 (+8) · miss_tokens 4 (+1)`` ("" if nothing)."""
    return " · ".join(f"{name} {metrics[name]} (+{metrics[name] - before.get(name, 0)})"
                      for name in metrics if metrics[name] != before.get(name, 0))
