"""The phrasing every "why" shares: the answer's shape (``Explanation``), the
components' names and units, where a step is (``step 12 (req_prefill r3, line 40)``)
and why data left a node (capacity, a cascade, the window, a cleanup), each sentence
built from a step's events and fields alone."""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

from cache.observe.events import Cause, Event, EventKind

from .. import ops
from ..ops.evict import EVICT
from ..timeline.fmt import plural
from ..timeline.timeline import StepRecord, Timeline
from ..ops.spec import BASE, fact, holds_states

CAUSE_TEXT = {
    Cause.REQUEST: "the op asked for it directly",
    Cause.CAPACITY: "eviction to make room",
    Cause.DUPLICATE: "incoming slots for tokens the tree already held go back to the pool",
    Cause.WINDOW: "the sliding window",
    Cause.TAIL: "the unaligned tail of a key: a partial page is never cached",
    Cause.CASCADE: "another component's eviction took it along",
    Cause.CLEANUP: "an emptied ancestor removed after its last child",
    Cause.PATH_CAP: "mamba_max_states_per_path: a deeper state was added on the path",
}


@dataclasses.dataclass(frozen=True)
class Explanation:
    title: str
    lines: tuple[str, ...]
    steps: tuple[int, ...] = ()  # the steps the lines cite, ascending

    def text(self) -> str:
        out = [self.title] + [f"  {line}" for line in self.lines]
        if self.steps:
            out.append("steps cited: " + ", ".join(map(str, self.steps)))
        return "\n".join(out)


# ---- where, and why data left -------------------------------------------------------------------
def _check_step(timeline: Timeline, step, allow_start: bool = True) -> None:
    last = len(timeline.records)
    first = 0 if allow_start else 1
    if type(step) is not int or not first <= step <= last:
        raise ValueError(f"step {step!r} is out of range: this timeline has steps {first}..{last}")


def _record(timeline: Timeline, step: int) -> StepRecord:
    return timeline.records[step - 1]


def _op_text(record: StepRecord) -> str:
    """``evict swa=4``, ``req_prefill r3``, ``unlock L1``: the op and the names it uses."""
    spec = ops.get(record.step.op)
    return spec.words(record.step.fields, record.step.op) if spec is not None else record.step.op


def _at(record: StepRecord) -> str:
    """``step 12 (req_prefill r3, line 40)``."""
    line = f", line {record.step.line}" if record.step.line else ""
    return f"step {record.index} ({_op_text(record)}{line})"


def _amount(component: Optional[str], n: int) -> str:
    one, many = fact(component, "UNIT", ("unit", "units"))
    return plural(n, one, many)


def _need(event: Event) -> Optional[int]:
    found = re.fullmatch(r"need (\d+)", event.detail)
    return int(found.group(1)) if found else None


def _cascade_source(event: Event) -> Optional[str]:
    found = re.match(r"from (\w+)", event.detail)
    return found.group(1) if found else None


def _split_child(event: Event) -> Optional[int]:
    """The node a SPLIT event cut (its detail is ``child N keeps M``)."""
    found = re.match(r"child (\d+) keeps", event.detail)
    return int(found.group(1)) if found else None


def _name(component: Optional[str]) -> str:
    return fact(component, "DISPLAY_NAME", component or "?")


def _noun(component: Optional[str]) -> str:
    return fact(component, "NOUN", f"{component} data")


def stays_below(component: Optional[str]) -> bool:
    """A split leaves this component's data (and its locks) on the lower node."""
    return bool(fact(component, "SPLIT_STAYS_BELOW"))


def _capacity_text(event: Event) -> str:
    """``SWA capacity eviction needed 6 slots (asked by the evict op)``."""
    need = _need(event)
    asked = f"needed {_amount(event.component, need)}" if need else "ran"
    who = f"asked by the {event.op} op" if event.op == EVICT.name else f"an allocation in {event.op} fell short"
    return f"{_name(event.component)} capacity eviction {asked} ({who})"


def _chosen_text(node: int, component: Optional[str], deleted: bool, record: Optional[StepRecord] = None) -> str:
    if component == BASE:
        return f"{_full_choice(node, record)}, so it was deleted whole"
    order = f"node #{node} was the least recently used unlocked {_name(component)} holder left"
    if deleted:
        return f"{order} and an evictable leaf, so it was deleted whole"
    return f"{order} and not an evictable leaf, so only its {_noun(component)} went (a tombstone)"


def _full_choice(node: int, record: Optional[StepRecord]) -> str:
    """Why Full's walk took this leaf: under lru its age; under another policy the key
    it had before the step against the first leaf the step left, e.g. ``priority:
    node #4 was evicted before #7: priority 0 < priority 1``."""
    before = record.store.state(record.index - 1) if record is not None else None
    if before is None or before.eviction_policy == "lru":
        return f"node #{node} was the least recently used evictable leaf"
    policy, order = before.eviction_policy, before.evictable_leaves
    if node not in order:
        return f"node #{node} became an evictable leaf during the walk and the {policy} policy took it next"
    after = record.state
    rival = next((i for i in order[order.index(node) + 1:]
                  if i in after.records and after.record(i).evictable_leaf), None)
    note = before.node(node).evict_note
    if rival is None:
        return f"{policy}: node #{node} ({note}) was an evictable leaf, and the walk took every one after it too"
    return f"{policy}: node #{node} was evicted before #{rival}: {note} < {before.node(rival).evict_note}"


def _took_text(events: list[Event]) -> str:
    parts = [_noun(e.component) if holds_states(e.component) else f"{_noun(e.component)} ({plural(e.tokens, 'token')})"
             for e in events]
    return " and ".join(parts) if len(parts) < 3 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _same_node(record: StepRecord, node: int) -> list[tuple[int, Event]]:
    return [(k, e) for k, e in enumerate(record.events) if e.node == node]


def _removal_text(record: StepRecord, event: Event, with_cascade: bool = True) -> str:
    """Why one component's data left a node: capacity (with the choice and, unless
    told not to, what the cascade took), a cascade (naming its trigger), the window,
    or a cleanup."""
    node, mine = event.node, _same_node(record, event.node)
    if event.cause is Cause.CASCADE:
        source = _cascade_source(event)
        trigger = next((e for _, e in mine if e.component == source and e.cause is not Cause.CASCADE
                        and e.kind in (EventKind.EVICT, EventKind.TOMBSTONE, EventKind.DEMOTE)), None)
        if trigger is None:
            return f"a cascade from {_name(source)}"
        what = {EventKind.TOMBSTONE: "tombstone", EventKind.DEMOTE: "demotion to the host"}.get(trigger.kind, "eviction")
        return f"a cascade from {_name(source)}'s {what}: {_removal_text(record, trigger, with_cascade=False)}"
    if event.kind is EventKind.DEMOTE:
        return (f"{_capacity_text(event)}; {_full_choice(node, record)} and had a host copy, so it stayed,"
                " host-only")
    if event.cause is Cause.CAPACITY:
        deleted = event.kind is EventKind.EVICT
        took = [e for _, e in mine if e.cause is Cause.CASCADE and _cascade_source(e) == event.component]
        text = f"{_capacity_text(event)}; {_chosen_text(node, event.component, deleted, record)}"
        return text + (f"; the cascade took its {_took_text(took)}" if took and with_cascade else "")
    if event.cause is Cause.CLEANUP:
        return f"node #{node} was an emptied ancestor without Full KV, removed {event.detail or 'after its last child'}"
    if event.cause is Cause.PATH_CAP:
        return (f"state dropped: path {event.detail or 'cap'} (in {_op_text(record)} an insert gave a deeper node"
                f" of the path a state; node #{node} held the shallowest one the cap may take; its Full KV stays)")
    if event.cause is Cause.WINDOW and event.kind is EventKind.TOMBSTONE:
        return (f"its last SWA window lock was released early ({_op_text(record)}) while it was an evictable leaf,"
                " so its SWA KV went at once")
    return CAUSE_TEXT.get(event.cause, event.cause.value) + (f" ({event.detail})" if event.detail else "")
