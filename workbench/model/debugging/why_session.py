"""``why`` about a session: why its data was evicted or is still there after a step.

The story is replayed from the events alone. A session's tag is the SESSION_REF events
whose detail starts with its id (each says the node's new ``session_ref``); a split
copies the tag to the new upper node as the cache does (but for Mamba, whose state
stays below). With the tags known at every event, each eviction that touched a node the
session ever tagged is told with its cause (``why`` phrasing: capacity, cascade, window)
and why the tag did not save it: it was gone (the session closed, or its coverage moved
on), or it was still there and no untagged data was left (eviction takes untagged data
first: the untagged victims it took first are named). A node it still holds says why:
tagged since which step, locked, and the evictions that took untagged data instead.
A streaming session keeps no tags: its slot's events (taken, borrowed, kept, released)
and the lock its slot holds tell its story.
"""

from __future__ import annotations

from collections import defaultdict

from cache.observe.events import Cause, EventKind

from ..ops.sessions import OPEN, RELEASE
from ..timeline.fmt import plural
from ..timeline.timeline import Timeline
from .why_text import Explanation, _at, _check_step, _name, _noun, _record, _removal_text, _split_child, stays_below

LOSS_KINDS = (EventKind.EVICT, EventKind.TOMBSTONE, EventKind.DEMOTE)
MAX_SPARED_LINES = 8  # evictions told that took untagged data instead (the rest are counted)


class _Replay:
    """Per (component, node): the session's own refs and every session's total, event by
    event, and what the session's data went through up to the step asked about."""

    def __init__(self, timeline: Timeline, step: int, sid: str) -> None:
        self.sid = sid
        self.mine: dict[tuple[str, int], int] = defaultdict(int)
        self.total: dict[tuple[str, int], int] = defaultdict(int)
        self.tagged_at: dict[tuple[str, int], int] = {}  # the step that last tagged it
        self.untagged_at: dict[tuple[str, int], tuple[int, Cause]] = {}  # the step and cause of its last untag
        self.losses: list[tuple[int, object, bool, list]] = []  # (step, event, tagged then, untagged taken first)
        self.spared: list[tuple[int, dict[str, list[int]]]] = []  # (step, component -> untagged victims)
        self.openings: list[int] = []
        self.closes: list[int] = []
        self.slot: list[int] = []  # steps with an event of the session's slot
        self.named = False
        prefix, slot_prefix = sid + " ", f"session {sid}:"
        for s in range(1, step + 1):
            record = _record(timeline, s)
            if record.step.fields.get("session") == sid:
                self.named = True
                if record.step.op == OPEN.name and record.error is None and (record.result or {}).get("success"):
                    self.openings.append(s)
                elif record.step.op == RELEASE.name and record.error is None:
                    self.closes.append(s)
            victims: dict[str, list[int]] = defaultdict(list)
            first_loss = len(self.losses)
            for e in record.events:
                key = (e.component, e.node)
                if e.kind is EventKind.SESSION_REF:
                    self.total[key] = int(e.detail.rsplit("=", 1)[1])
                    if e.detail.startswith(prefix):
                        self._tag(key, 1 if f"{sid} +" in e.detail else -1, s, e.cause)
                elif e.kind is EventKind.SPLIT:
                    self._split(e, record, s)
                elif e.kind is EventKind.SLOT and e.detail.startswith(slot_prefix):
                    self.slot.append(s)
                elif e.kind in LOSS_KINDS and e.node is not None:
                    if key in self.tagged_at:  # a node the session ever tagged
                        self.losses.append((s, e, self.mine[key] > 0, {c: list(v) for c, v in victims.items()}))
                    if e.cause is Cause.CAPACITY and self.total[key] == 0:  # no session's tag on it then
                        victims[e.component].append(e.node)
            lost_tagged = any(x[2] for x in self.losses[first_loss:])  # then its loss lines name the victims
            if victims and not lost_tagged and any(n > 0 for n in self.mine.values()):
                self.spared.append((s, dict(victims)))

    def _tag(self, key, delta: int, s: int, cause: Cause) -> None:
        self.mine[key] += delta
        if delta > 0 and self.mine[key] == 1:
            self.tagged_at[key] = s
        elif self.mine[key] == 0:
            self.untagged_at[key] = (s, cause)

    def _split(self, event, record, s: int) -> None:
        """The new upper node takes the tags of the node it was cut from (Full, SWA)."""
        child = _split_child(event)
        if child is None:
            return
        for component, node in list(self.total):
            if node == child and not stays_below(component):
                upper = (component, event.node)
                self.total[upper] = self.total[(component, child)]
                if self.mine[(component, child)]:
                    self.mine[upper] = self.mine[(component, child)]
                    self.tagged_at[upper] = self.tagged_at[(component, child)]


def why_session(timeline: Timeline, step: int, sid: str) -> Explanation:
    """Session ``sid`` after ``step``: open or closed, what it tags, and for every node it
    ever tagged why that node's data is gone (which eviction, and why the tag did not
    save it) or still there (tagged, locked, untagged data taken instead)."""
    _check_step(timeline, step)
    replay = _Replay(timeline, step, sid)
    if not (replay.named or replay.tagged_at or replay.slot):
        raise ValueError(f"no session {sid!r} up to step {step}: no step names it and no event is about it")
    cited: set[int] = set(replay.openings[-1:] + replay.closes[-1:] + replay.slot)
    lines = [_status_line(timeline, replay)]
    state = timeline.state_after(step)
    lines.append(_frontier_line(state, sid, bool(replay.slot)))
    lines += _kept_lines(timeline, replay, state, cited)
    lines += _loss_lines(timeline, replay, cited)
    lines += _spared_lines(timeline, replay, cited)
    lines += _slot_lines(timeline, replay, state)
    return Explanation(f"session {sid} after step {step}", tuple(lines), tuple(sorted(cited)))


def _status_line(timeline: Timeline, replay: _Replay) -> str:
    opened = replay.openings[-1] if replay.openings else None
    closed = replay.closes[-1] if replay.closes else None
    if closed is not None and (opened is None or closed > opened):
        if replay.slot and not replay.tagged_at:
            return f"closed at {_at(_record(timeline, closed))}: its slot let go of what it kept"
        return (f"closed at {_at(_record(timeline, closed))}: its tags went with the close, so its data became "
                "evictable like any other (untagged data goes first)")
    if opened is not None:
        generation = (_record(timeline, opened).result or {}).get("generation")
        gen = f" (generation {generation})" if generation is not None else ""
        return f"open since {_at(_record(timeline, opened))}{gen}"
    return "never opened by a session_open: its requests named it"


def _frontier_line(state, sid: str, streaming: bool = False) -> str:
    found = [f"{_name(c)} #{r.id}" for r in state.records.values() if r is not None
             for c, comp in zip(state.components, r.components) if sid in comp.session_ids]
    if found:
        return "tags now, through its frontier " + ", ".join(found)
    return "tags nothing (a streaming session: its slot's lock keeps its KV)" if streaming else "tags nothing now"


def _slot_lines(timeline: Timeline, replay: _Replay, state) -> list[str]:
    """Each event of the session's slot, and the nodes the slot's lock holds now."""
    out, locked = [], {}
    for s in replay.slot:
        record = _record(timeline, s)
        for e in record.events:
            if e.kind is not EventKind.SLOT or not e.detail.startswith(f"session {replay.sid}:"):
                continue
            what = e.detail.split(": ", 1)[1]
            out.append(f"its slot at {_at(record)}: {what}")
            if what.startswith("taken from "):
                rid = what.removeprefix("taken from ")
                locked = {(x.component, x.node): s for x in record.events
                          if x.kind is EventKind.LOCK and x.request == rid and x.node is not None}
            elif what == "released":
                locked = {}
    for (component, node), s in sorted(locked.items(), key=lambda x: x[0][1]):
        record = state.record(node)
        if record is not None and component in state.components:
            ref = record.components[state.components.index(component)].lock_ref
            if ref:
                out.append(f"its slot has locked #{node} ({_name(component)}, lock_ref {ref}) since "
                           f"{_at(_record(timeline, s))}: no eviction may take it or its ancestors")
    return out


def _kept_lines(timeline: Timeline, replay: _Replay, state, cited: set[int]) -> list[str]:
    """Each node-component it ever tagged that still holds data: why it is there."""
    out = []
    order = {c: i for i, c in enumerate(state.components)}
    for (component, node), first in sorted(replay.tagged_at.items(),
                                           key=lambda x: (x[1], x[0][1], order.get(x[0][0], 0))):
        record = state.record(node)
        if record is None or component not in state.components:
            continue
        comp = record.components[state.components.index(component)]
        if comp.value_len is None:
            continue
        what = f"{_noun(component)} of #{node} is still there"
        reasons = []
        if replay.mine[(component, node)] > 0:
            cited.add(first)
            reasons.append(f"tagged by the session since {_at(_record(timeline, first))} (session_ref "
                           f"{comp.session_ref}): eviction takes untagged data first")
        else:
            s, cause = replay.untagged_at[(component, node)]
            cited.add(s)
            how = "the session closed" if cause is Cause.SESSION_CLOSE else "its coverage moved off it"
            reasons.append(f"untagged since {_at(_record(timeline, s))} ({how}), but no eviction has reached it yet")
        if comp.lock_ref:
            reasons.append(f"locked (lock_ref {comp.lock_ref}): no eviction may take it")
        out.append(f"{what}: " + "; ".join(reasons))
    return out


def _loss_lines(timeline: Timeline, replay: _Replay, cited: set[int]) -> list[str]:
    out = []
    told = {(s, e.node) for s, e, _, _ in replay.losses if e.cause is not Cause.CASCADE}
    for s, event, tagged, victims in replay.losses:
        if event.cause is Cause.CASCADE and (s, event.node) in told:
            continue  # the trigger's line names what its cascade took
        cited.add(s)
        record = _record(timeline, s)
        verb = {EventKind.TOMBSTONE: "tombstoned", EventKind.DEMOTE: "demoted to the host"}.get(event.kind, "evicted")
        text = f"{_noun(event.component)} of #{event.node} {verb} at {_at(record)}: {_removal_text(record, event)}"
        key = (event.component, event.node)
        if tagged:
            first = victims.get(event.component, [])
            after = (f" after the untagged {', '.join(f'#{n}' for n in first)}" if first else "")
            why = ("the cascade does not spare it" if event.cause is Cause.CASCADE else
                   f"it was still tagged, but no untagged {_noun(event.component)} was left to take{after}")
        elif key in replay.untagged_at:
            u, cause = replay.untagged_at[key]
            cited.add(u)
            how = ("the session closed" if cause is Cause.SESSION_CLOSE else
                   "its coverage had moved off it (a newer frontier, or a deleted one receding)")
            why = f"it was no longer tagged: {how} at {_at(_record(timeline, u))}, so it was evictable first"
        else:
            why = "it was not tagged then"
        out.append(f"{text}; {why}")
    return out


def _spared_lines(timeline: Timeline, replay: _Replay, cited: set[int]) -> list[str]:
    out = []
    for s, victims in replay.spared[:MAX_SPARED_LINES]:
        cited.add(s)
        took = "; ".join(f"{_name(c)} {', '.join(f'#{n}' for n in nodes)}" for c, nodes in victims.items())
        out.append(f"{_at(_record(timeline, s))} took untagged data ({took}) while the session's tagged data "
                   "stayed: eviction prefers untagged data")
    more = len(replay.spared) - MAX_SPARED_LINES
    if more > 0:
        out.append(f"and {plural(more, 'more eviction')} took untagged data while it held tags")
    return out

