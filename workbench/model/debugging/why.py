"""The workbench's "why": how a node came to be as it is, why a match stopped where it
did, and what caused one event, in sentences.

Every sentence is built from the timeline alone: the events' kind, cause, detail and
request, and the steps' ops and fields; nothing is guessed. A node's story reads only
the steps whose events name it (or a node split from it), found through an index of
node id -> steps, so a 10,000-step timeline answers in what that node's steps cost.
The phrasing the whys share is ``why_text``.
"""

from __future__ import annotations

import bisect
import weakref
from collections.abc import Callable
from typing import Optional

from cache.observe.events import Cause, Event, EventKind

from .. import ops
from ..ops.keys import MATCH
from ..timeline.fmt import event_text, plural
from ..timeline.timeline import StepRecord, Timeline
from .why_text import (
    CAUSE_TEXT, Explanation, _amount, _at, _cascade_source, _check_step, _name, _noun, _record,
    _removal_text, _same_node, _split_child, _took_text, stays_below,
)
from ..ops.spec import BASE, holds_states

StepsTouching = Callable[[int], list[int]]  # node id -> steps (ascending) whose events name it
DATA_KINDS = (EventKind.SET, EventKind.TOMBSTONE, EventKind.CASCADE, EventKind.EVICT, EventKind.DEMOTE,
              EventKind.LOAD)


# ---- the node -> steps index ---------------------------------------------------------------------
class _NodeSteps:
    """node id -> steps whose events name it; extended as the timeline grows."""

    def __init__(self) -> None:
        self.by_node: dict[int, list[int]] = {}
        self.done = 0

    def update(self, records: list[StepRecord]) -> None:
        for i in range(self.done, len(records)):
            record = records[i]
            for node in {e.node for e in record.events if e.node is not None}:
                self.by_node.setdefault(node, []).append(record.index)
        self.done = len(records)


_INDEXES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # timeline.store -> _NodeSteps


def node_steps(timeline: Timeline) -> StepsTouching:
    """The timeline's node -> steps index: built in one pass on first use, kept with
    the timeline, and extended (not rebuilt) when steps were added since."""
    stored = getattr(timeline.store, "steps_naming", None)
    if stored is not None:  # a stored run keeps the index in its file
        return stored
    index = _INDEXES.get(timeline.store)
    if index is None:
        index = _INDEXES[timeline.store] = _NodeSteps()

    def steps(node: int) -> list[int]:
        if index.done < len(timeline.records):
            index.update(timeline.records)
        return index.by_node.get(node, [])

    return steps


# ---- why_node ----------------------------------------------------------------------------------
def why_node(timeline: Timeline, step: int, node: int, steps_touching: Optional[StepsTouching] = None) -> Explanation:
    """How node ``node`` came to be as it is after ``step``: its creation and splits,
    each component's data (or tombstone, or absence) with the step and cause behind
    it, who holds its locks, or how it left the tree."""
    _check_step(timeline, step)
    if type(node) is not int:
        raise ValueError(f"node {node!r} is not a node id")
    touching = steps_touching or node_steps(timeline)
    state = timeline.state_after(step)
    title = f"node #{node} after step {step}"
    if node == state.root_id:
        return Explanation(title, ("the root: always in the tree, holding no data and one permanent lock per component",))
    every = touching(node)
    steps = every[: bisect.bisect_right(every, step)]
    record = state.record(node)
    if not steps:
        if every:
            raise ValueError(f"node {node} is not in the tree after step {step}: it first appears at step {every[0]}")
        raise ValueError(f"unknown node {node}: no step of this timeline names it")
    seen = [(s, k, e) for s in steps for k, e in _same_node(_record(timeline, s), node)]
    cited = {steps[0]}
    lines = [_creation_text(timeline, node, seen)]
    if record is None:
        lines.extend(_deletion_lines(timeline, node, seen, cited))
        return Explanation(title + ": not in the tree", tuple(lines), tuple(sorted(cited)))
    for s, line in _split_lines(timeline, state, node, touching, step):
        lines.append(line)
        cited.add(s)
    for i, component in enumerate(state.components):
        comp = record.components[i]
        lines.append(_component_line(timeline, node, component, comp.value_len, seen, cited, comp.host_len))
    lines.extend(_lock_lines(timeline, node, state, record, seen, touching, cited))
    return Explanation(title, tuple(lines), tuple(sorted(cited)))


def _creation_text(timeline: Timeline, node: int, seen) -> str:
    s, _, event = next((x for x in seen if x[2].kind in (EventKind.ADD, EventKind.SPLIT)), seen[0])
    at = _at(_record(timeline, s))
    if event.kind is EventKind.ADD:
        return f"created at {at}: a new leaf of {plural(event.tokens, 'token')}"
    if event.kind is EventKind.SPLIT:
        child = _split_child(event)
        return f"created at {at} by splitting node #{child}: it took #{child}'s first {plural(event.tokens, 'token')}"
    return f"first named at {at} ({event_text(event, s)})"


def _deletion_lines(timeline: Timeline, node: int, seen, cited: set[int]) -> list[str]:
    deletion = next(((s, e) for s, _, e in reversed(seen) if e.kind is EventKind.DELETE), None)
    if deletion is None:
        return ["it is gone, but no event of its steps deleted it"]
    s, event = deletion
    cited.add(s)
    record = _record(timeline, s)
    mine = [e for _, e in _same_node(record, node)]
    if event.cause is Cause.CLEANUP:
        went = [e for e in mine if e.kind is EventKind.EVICT and e.cause is Cause.CLEANUP]
        text = f"deleted at {_at(record)}: {_removal_text(record, event)}"
        return [text + (f"; its {_took_text(went)} went with it" if went else "")]
    trigger = next((e for e in mine if e.kind is EventKind.EVICT and e.cause is not Cause.CASCADE), None)
    if trigger is None:
        return [f"deleted at {_at(record)} ({event.cause.value})"]
    return [f"deleted at {_at(record)}: {_removal_text(record, trigger)}"]


def _split_lines(timeline: Timeline, state, node: int, touching: StepsTouching, step: int) -> list[tuple[int, str]]:
    """Splits that cut this node (it kept its id as the lower part): each one put a new
    node right above it, so walk up while the parent was made by splitting this node."""
    out = []
    parent = state.record(node).parent
    while parent is not None and parent != state.root_id:
        first = touching(parent)[:1]
        record = _record(timeline, first[0]) if first and first[0] <= step else None
        split = next((e for _, e in _same_node(record, parent) if e.kind is EventKind.SPLIT), None) if record else None
        if split is None or _split_child(split) != node:
            break
        out.append((record.index, f"split at {_at(record)}: node #{parent} took its first {plural(split.tokens, 'token')}"))
        parent = state.record(parent).parent
    return out[::-1]


def _component_line(timeline: Timeline, node: int, component: str, value_len, seen, cited: set[int],
                    host_len: Optional[int] = None) -> str:
    """Where this component's current data (or its absence) on the node came from."""
    origin = None
    for s, k, e in seen:
        if e.kind is EventKind.SPLIT or (e.kind is EventKind.ADD and component == BASE):
            origin = (s, e)
        elif e.component == component and e.kind in DATA_KINDS:
            origin = (s, e)
    name = _name(component)
    if value_len is None and host_len is not None:
        now = f"{name}: on the host only ({_amount(component, host_len)})"
    elif value_len is None:
        now = f"{name}: none"
    else:
        now = f"{name}: a state" if holds_states(component) else f"{name}: {plural(value_len, 'token')} of KV"
    if origin is None:
        return f"{now}; no event of its steps set any since its creation"
    s, event = origin
    cited.add(s)
    record = _record(timeline, s)
    at = _at(record)
    if event.kind is EventKind.ADD:
        return f"{now}, written by the insert that created it at {at}"
    if event.kind is EventKind.SPLIT:
        child = _split_child(event)
        if value_len is not None:
            return f"{now}, the upper part of node #{child}'s {_noun(component)}, split off at {at}"
        if stays_below(component):
            return f"{now}: the split at {at} left the {_noun(component)} on the deeper node #{child}"
        return f"{now}: node #{child}'s part above the cut had none when it was split at {at}"
    if event.kind is EventKind.SET:
        if component == BASE:  # Full is set at creation; a later SET replaced its slots
            return f"{now}, its slots replaced at {at}: {event.detail or event.cause.value}"
        when = "by the op that created it" if s == seen[0][0] else "(it had none before)"
        why = f"; {event.detail}" if event.detail else ""
        return f"{now}, set at {at} {when}, cause: {event.cause.value}{why}"
    if event.kind is EventKind.LOAD:
        return f"{now}, back on the device at {at}: {event.detail}"
    if event.kind is EventKind.DEMOTE:
        return f"{now}; demoted at {at}: {_removal_text(record, event)}"
    verb = "tombstoned" if event.kind is EventKind.TOMBSTONE else "evicted"
    return f"{now}; {verb} at {at}: {_removal_text(record, event)}"


# ---- locks ----------------------------------------------------------------------------------------
def _holder(record: StepRecord, event: Event) -> str:
    """Who a lock event is for: a named lock, a request, or (else) the step itself."""
    op, fields = record.step.op, record.step.fields
    spec = ops.get(op)
    lock_name = next((fields[f.name] for f in (spec.fields if spec else ()) if "locks" in (f.defines, f.uses)
                      and f.name in fields), None)
    if lock_name is not None:  # a lock op's own lock
        return f"lock {lock_name}"
    if event.request:
        if event.request.startswith(("backup #", "load #")):  # the host tier's transfer in flight
            return f"the {event.request} in flight"
        return f"request {event.request}"
    return f"{op} at step {record.index}"


def _held_locks(timeline: Timeline, node: int, seen, touching: StepsTouching, depth: int = 0) -> dict:
    """component -> holder -> steps whose lock on the node is not yet released, replayed
    from the node's lock events; a node made by a split starts with the locks its lower
    part held at that moment (but for what a split leaves below: stays_below)."""
    held: dict[str, dict[str, list[int]]] = {}
    for s, k, e in seen:
        if e.kind is EventKind.SPLIT and depth < 64:
            child = _split_child(e)
            below = touching(child)
            before = [(t, j, x) for t in below[: bisect.bisect_right(below, s)]
                      for j, x in _same_node(_record(timeline, t), child) if t < s or j < k]
            inherited = _held_locks(timeline, child, before, touching, depth + 1)
            for component, holders in inherited.items():
                if not stays_below(component):
                    held[component] = {h: list(v) for h, v in holders.items()}
        elif e.kind in (EventKind.LOCK, EventKind.UNLOCK):
            holders = held.setdefault(e.component, {})
            who = _holder(_record(timeline, s), e)
            if e.kind is EventKind.LOCK:
                holders.setdefault(who, []).append(s)
            elif holders.get(who):
                holders[who].pop()
    return held


def _lock_lines(timeline: Timeline, node: int, state, record, seen, touching: StepsTouching, cited: set[int]) -> list[str]:
    held = _held_locks(timeline, node, seen, touching)
    lines = []
    for i, component in enumerate(state.components):
        lock_ref = record.components[i].lock_ref
        holders = sorted((s, who) for who, steps in held.get(component, {}).items() for s in steps)
        if not lock_ref and not holders:
            last = next((s for s, _, e in reversed(seen) if e.kind is EventKind.UNLOCK and e.component == component), None)
            if last is not None:
                cited.add(last)
                lines.append(f"{_name(component)} unlocked; last released at {_at(_record(timeline, last))}")
            continue
        cited.update(s for s, _ in holders)
        text = ", ".join(f"{who} since {_at(_record(timeline, s))}" for s, who in holders) or "nobody traced"
        untraced = lock_ref - len(holders)
        extra = f" ({untraced} not traced to a step)" if untraced > 0 else ""
        lines.append(f"{_name(component)} lock_ref {lock_ref}: held by {text}{extra}")
    return lines or ["never locked (up to this step)"]


# ---- why_match ------------------------------------------------------------------------------------
def asks_about_its_match(record: StepRecord) -> bool:
    """Whether "why" on this step means why its match stopped: the step matched (its
    verdicts are among its events) and is a match op, or a check that failed is one of
    a match's results (a request's ``prefix_len``, a host hit length)."""
    if not any(e.kind is EventKind.VERDICT for e in record.events):
        return False
    return record.step.op == MATCH.name or any(f.field in MATCH.results for f in record.failures)


def why_match(timeline: Timeline, step: int) -> Explanation:
    """Why a step's match stopped where it did: each component's verdict (how far it
    accepts, and what stopped it), then the prefix every component accepts."""
    _check_step(timeline, step, allow_start=False)
    record = _record(timeline, step)
    events = record.events
    groups: list[list[tuple[int, Event]]] = []
    for k, e in enumerate(events):
        if e.kind is EventKind.VERDICT:
            if e.component == BASE or not groups:
                groups.append([])
            groups[-1].append((k, e))
    if not groups:
        raise ValueError(f"step {step} ({record.step.op}) made no match to explain")
    lines, start = [], 0
    for n, group in enumerate(groups, 1):
        if len(groups) > 1:
            lines.append(f"match {n} of {len(groups)}:")
        for _, e in group:
            lines.append(f"{_name(e.component)} accepts {plural(e.tokens, 'token')}, up to node #{e.node}: {e.detail}")
        # the match's end was promoted just before its verdicts (none when it is the root)
        promote = next((e for e in reversed(events[start : group[0][0]]) if e.kind is EventKind.PROMOTE), None)
        start = group[-1][0] + 1
        end = f"node #{promote.node}" if promote is not None else "the root"
        prefix = (record.result or {}).get("prefix_len") if len(groups) == 1 else None
        got = f"prefix_len {prefix}, " if prefix is not None else ""
        lines.append(f"result: {got}ending at {end}, the deepest node every component accepts")
    if record.error:
        lines.append(f"the op then failed: {record.error}")
    title = f"why the match at {_at(record)} stopped where it did"
    return Explanation(title, tuple(lines), (step,))


# ---- why_event ------------------------------------------------------------------------------------
def why_event(timeline: Timeline, step: int, event_index: int) -> Explanation:
    """One event of a step and its cause chain: a cascade names its trigger event, a
    capacity eviction what asked for it, how much, and why this node."""
    _check_step(timeline, step, allow_start=False)
    record = _record(timeline, step)
    events = record.events
    if type(event_index) is not int or not 0 <= event_index < len(events):
        raise ValueError(f"step {step} has {plural(len(events), 'event')}: no event {event_index!r}")
    event = events[event_index]
    lines = [f"at {_at(record)}" + (f", for request {event.request}" if event.request else "")]
    if event.kind is EventKind.VERDICT:
        lines.append(f"{_name(event.component)}'s match verdict: it accepts {plural(event.tokens, 'token')}, "
                     f"up to node #{event.node}: {event.detail}")
    elif event.kind is EventKind.ACTION:
        lines.append(f"the tree core decided this during {event.op} and handed it to the controller, "
                     f"which applied it to the pools: {event.detail}")
        effect = next((e for e in events[event_index + 1:] if e.kind is not EventKind.ACTION), None)
        if effect is not None:
            lines.append(f"its first effect: {event_text(effect, step)}")
    elif event.cause is Cause.CASCADE:
        source = _cascade_source(event)
        trigger = next(((k, e) for k, e in _same_node(record, event.node) if e.component == source
                        and e.cause is not Cause.CASCADE and e.kind in (EventKind.EVICT, EventKind.TOMBSTONE)), None)
        if trigger is not None:
            lines.append(f"triggered by event {trigger[0]}: {event_text(trigger[1], step)}")
        lines.append(_removal_text(record, event))
    elif event.kind is EventKind.DELETE and event.cause is Cause.CAPACITY:
        trigger = next(((k, e) for k, e in _same_node(record, event.node)
                        if e.kind is EventKind.EVICT and e.cause is Cause.CAPACITY), None)
        if trigger is not None:
            lines.append(f"its data left first, event {trigger[0]}: {event_text(trigger[1], step)}")
            lines.append(_removal_text(record, trigger[1]))
    elif event.node is not None and event.kind in (EventKind.EVICT, EventKind.TOMBSTONE, EventKind.DELETE):
        lines.append(_removal_text(record, event))
    elif event.kind in (EventKind.LOCK, EventKind.UNLOCK):
        lines.append(f"for {_holder(record, event)}; {event.detail or 'no count given'}")
    elif event.cause is Cause.CAPACITY:
        lines.append(f"the pools got back what capacity eviction freed in {event.op}")
    else:
        detail = f" ({event.detail})" if event.detail else ""
        lines.append(f"{event.cause.value}: {CAUSE_TEXT.get(event.cause, '')}{detail}")
    return Explanation(event_text(event, step), tuple(lines), (step,))
