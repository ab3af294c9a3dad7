"""``why`` for a prefetch from storage: what each stage found and why it ended as it did.

Built from the timeline alone: the prefetch's own events (issued or declined, what the
hit query found, slots taken, a read delayed, how it ended) and the admission polls
(``prefetch_progress`` steps) with their results, read against the stop policy the
scenario's config names.
"""

from __future__ import annotations

from cache.observe.events import EventKind

from ..timeline.timeline import Timeline
from .why_text import Explanation, _at, _check_step

POLICY_TEXT = {
    "best_effort": "best_effort: an admission poll takes what has arrived, nothing at all before the hit query "
                   "and the host slots (the first flush)",
    "wait_complete": "wait_complete: an admission poll waits until every page is read",
    "timeout": "timeout: an admission poll waits, counting flushes from the first poll that found it unfinished, "
               "then takes what has arrived",
}


def _policy(timeline: Timeline) -> str:
    hicache = timeline.scenario.config.get("hicache") or {}
    storage = hicache.get("storage") if isinstance(hicache, dict) else None
    return (storage or {}).get("prefetch_policy", "best_effort")


def why_prefetch(timeline: Timeline, step: int, rid: str) -> Explanation:
    """Prefetch ``rid`` up to ``step``: every stage and poll, in order, each with its step."""
    _check_step(timeline, step)
    lines, cited = [], []
    for record in timeline.records[:step]:
        told = [e.detail for e in record.events
                if e.kind is EventKind.TRANSFER and e.request == rid and e.detail.startswith("prefetch ")]
        if record.step.op == "prefetch_progress" and record.step.fields.get("rid") == rid and record.result:
            result = record.result
            if result.get("done"):
                told.append(f"the admission poll let the request go on with {result.get('prefetched', 0)} tokens "
                            "the prefetch put on the host")
            else:
                told.append("the admission poll held the request back: the prefetch is still in flight")
        if told:
            lines.append(f"{_at(record)}: " + "; ".join(told))
            cited.append(record.index)
    if not lines:
        raise ValueError(f"no prefetch {rid!r} up to step {step}")
    lines.append(f"stop policy {POLICY_TEXT[_policy(timeline)]}")
    return Explanation(f"prefetch {rid} up to step {step}", tuple(lines), tuple(cited))
