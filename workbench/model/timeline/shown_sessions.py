"""The sessions at one step, one row each, for every view (the TUI's sessions panel, the
SVG's sessions table): radix sessions from the state's ``sessions`` (generation,
frontier, the nodes their coverage holds and what those hold) and the scheduler's
sessions and streaming slots from ``streaming_sessions``. Viewers render these rows;
what a session covers is decided here once, as cache/tree/session_refs.py walks it:

* ``path`` (Full): each frontier and its ancestors;
* ``window`` (SWA): each frontier and the ancestors its walk covered (the snapshot's
  ``covered_len`` per frontier: a later split cannot shorten the walk);
* ``node`` (Mamba and the rest): the frontier only.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from cache.basics.keys import TOKEN_BYTES

from ..scenarios.errors import printable

SESSION_OPS = frozenset({"session_open", "session_release", "session_reap", "stream_turn"})


@dataclasses.dataclass(frozen=True)
class SessionRow:
    sid: str
    generation: Optional[int]  # the radix session's current generation (None: not open there)
    state: str  # "open", "streaming", "closing", "in flight", "closed ✝" …, joined by ", "
    frontier: tuple[tuple[str, tuple[int, ...]], ...]  # per component: its frontier (tagged) nodes
    coverage: tuple[tuple[str, tuple[int, ...]], ...]  # per component: every node its coverage holds
    held: tuple[tuple[str, int], ...]  # per component: the value lengths its coverage holds, summed
    slot: Optional[str] = None  # a streaming slot's summary (None: no slot)
    slot_kv: Optional[int] = None  # the slot's record: committed KV tokens

    @property
    def frontier_nodes(self) -> frozenset[int]:
        return frozenset(n for _, ids in self.frontier for n in ids)

    @property
    def covered_nodes(self) -> frozenset[int]:
        return frozenset(n for _, ids in self.coverage for n in ids)

    def cells(self) -> dict[str, str]:
        """The row as short strings, one per column of ``COLUMNS``."""
        return {
            "session": printable(self.sid),
            "gen": "–" if self.generation is None else str(self.generation),
            "state": self.state,
            "frontier": "; ".join(f"{name} " + ",".join(f"#{n}" for n in ids) for name, ids in self.frontier) or "–",
            "holds": " ".join(f"{name}:{held}" for name, held in self.held) or "–",
            "slot": printable(self.slot or "–"),
        }


COLUMNS = ("session", "gen", "state", "frontier", "holds", "slot")


def has_sessions(scenario) -> bool:
    """Whether a scenario uses sessions at all: the session radix cache is on, or a
    step opens, closes or reaps one, runs a streaming turn or names one in a prefill."""
    if scenario.config.get("session_radix_cache"):
        return True
    summary = getattr(scenario.steps, "summary", None)  # a stored run knows without reading every step
    if summary is not None:
        return bool(set(summary["ops"]) & SESSION_OPS) or summary["names_session"]
    return any(step.op in SESSION_OPS or step.fields.get("session") is not None for step in scenario.steps)


def session_rows(state) -> tuple[SessionRow, ...]:
    """One row per session the state knows (open, tagged, closed or holding a slot), by id."""
    refs, streaming = state.sessions, state.streaming_sessions
    generations = refs.generations if refs is not None else {}
    leaves = refs.leaves if refs is not None else {}
    closed = set(refs.closed) if refs is not None else set()
    controller = streaming.controller if streaming is not None else {}
    slots = streaming.slots if streaming is not None else {}
    rows = []
    for sid in sorted(set(generations) | set(leaves) | closed | set(controller) | set(slots)):
        frontier = tuple((name, tuple(ids)) for name, ids in leaves.get(sid, {}).items() if ids)
        coverage = tuple((name, _covered(state, refs, sid, name, ids)) for name, ids in frontier)
        held = tuple((name, _held(state, name, ids)) for name, ids in coverage)
        slot = slots.get(sid)
        rows.append(SessionRow(sid, generations.get(sid), _state_words(sid, generations, closed, controller, slot),
                               frontier, coverage, held, _slot_text(slot),
                               None if slot is None else slot.kv_committed_len))
    return tuple(rows)


def session_row(state, sid: Optional[str]) -> Optional[SessionRow]:
    return next((row for row in session_rows(state) if row.sid == sid), None) if sid is not None else None


def _state_words(sid, generations, closed, controller, slot) -> str:
    words = []
    ctrl = controller.get(sid)
    if ctrl is not None:
        words.append("streaming" if ctrl.streaming else "open")
        if ctrl.close_on_finish:
            words.append("closing")
        if ctrl.inflight:
            words.append("in flight")
    elif sid in generations:
        words.append("open")
    if sid in closed:
        words.append("closed ✝")
    if not words:
        words.append("slot only" if slot is not None else "not open")
    return ", ".join(words)


def _slot_text(slot) -> Optional[str]:
    if slot is None:
        return None
    if not slot.holds_kv:
        return "slot empty"
    text = f"kv {slot.kv_committed_len} ({slot.cache_protected_len} in tree)"
    if slot.lock_node is not None:
        text += f" lock #{slot.lock_node}"
    if slot.publishes_prompt:
        text += " publishing"
    if slot.borrowed_by:
        text += " lent to " + ",".join(slot.borrowed_by)
    return text


def _covered(state, refs, sid: str, name: str, frontier: tuple[int, ...]) -> tuple[int, ...]:
    kind = refs.coverage.get(name, "node")
    spans = refs.covered_len.get(sid, {}).get(name, {})
    root, out = state.root_id, {}
    for leaf in frontier:
        if kind == "node":
            out[leaf] = None
            continue
        span = spans.get(leaf) if kind == "window" else None
        node_id, covered = leaf, 0
        while node_id is not None and node_id != root:
            if span is not None and covered >= span:
                break
            record = state.record(node_id)
            if record is None:
                break
            out[node_id] = None
            covered += len(record.key) // TOKEN_BYTES
            node_id = record.parent
    return tuple(out)


def _held(state, name: str, nodes: tuple[int, ...]) -> int:
    i = state.components.index(name)
    total = 0
    for node_id in nodes:
        record = state.record(node_id)
        if record is not None and record.components[i].value_len is not None:
            total += record.components[i].value_len
    return total
