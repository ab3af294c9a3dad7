"""Expectable session state (issue 27): what a step may ``expect`` of the session radix
cache, the session controller and the streaming slots, checked when the file loads and
read after the step runs.

* ``<component>_session_ref = { 7 = 1 }`` — per node id: that node's ``session_ref`` in
  the component (the sessions whose coverage holds it); ``"no node"`` when it is gone
* ``sessions_open = ["s1", "s2"]`` — the controller's open sessions, in name order
* ``session_generations = { s1 = 2 }`` — each listed session's current generation
* ``sessions_closed = ["s1"]`` — the closed-session tombstones, oldest close first
* ``session_leaves = { s1 = { full = [3], swa = [3] } }`` — a listed session's frontier
  per component (node ids ascending; a component holding none is left out, ``{}``: none)
* ``session_slots = { s1 = { holds_kv = true, kv_committed_len = 6 } }`` — the listed
  fields of a listed session's streaming slot (``"no slot"`` when it holds none)

Tables are partial (only the sessions, nodes and slot fields listed are compared);
lists are whole. The refs' fields (the first, generations, tombstones, leaves) need
``[config] session_radix_cache = true``; without it they would only ever read empty.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from .errors import ScenarioError, shown

SESSION_REF_SUFFIX = "session_ref"
REFS_FIELDS = ("session_generations", "sessions_closed", "session_leaves")  # need session_radix_cache
SESSION_FIELDS = ("sessions_open", "session_slots") + REFS_FIELDS
SLOT_FIELDS = {  # SlotView's fields and the values each takes
    "holds_kv": bool, "cache_protected_len": int, "kv_committed_len": int, "kv_allocated_len": int,
    "lock_node": int, "publishes_prompt": bool, "borrowed_by": list,
}
NO_NODE, NOT_OPEN, NO_SLOT = "no node", "not open", "no slot"
_NODE_ID = re.compile(r"^(0|[1-9][0-9]*)$")


def session_ref_component(key: str) -> Optional[str]:
    """The component a ``<component>_session_ref`` field names, or None."""
    if not key.endswith("_" + SESSION_REF_SUFFIX):
        return None
    return key[: -len(SESSION_REF_SUFFIX) - 1] or None


def is_session_field(key: str) -> bool:
    return key in SESSION_FIELDS or session_ref_component(key) is not None


def check_session_expect(key: str, value: Any, components, session_radix: bool, name: str,
                         line: Optional[int]) -> None:
    """Refuse a bad expected value with the file, line and field (ScenarioError)."""
    where = f"expect.{key}"

    def fail(message: str, field: str = where) -> None:
        raise ScenarioError(message, name, line, field)

    component = session_ref_component(key)
    if component is not None and component not in components:
        fail(f"{key} needs the {component} component")
    if (component is not None or key in REFS_FIELDS) and not session_radix:
        fail(f"{key} needs the session radix cache ([config] session_radix_cache = true)")
    if component is not None:
        if not isinstance(value, dict) or not value:
            fail("must be a table {node_id = session_ref} (node ids as keys: { 3 = 1 })")
        for node, ref in value.items():
            if not _NODE_ID.match(node):
                fail(f"{shown(node)} is not a node id (a whole number; see urc show)", f"{where}.{node}")
            if isinstance(ref, bool) or not isinstance(ref, int) or ref < 0:
                fail("expected session_ref must be a non-negative int", f"{where}.{node}")
        return
    if key in ("sessions_open", "sessions_closed"):
        if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
            fail("expected value must be a list of session ids (strings)")
        if len(set(value)) != len(value):
            fail("a session is listed twice")
        if key == "sessions_open" and value != sorted(value):
            fail(f"list the open sessions in name order: {shown(sorted(value))}")
        return
    if not isinstance(value, dict) or not value:
        fail(f"must be a table {{session_id = …}} ({_EXAMPLE[key]})")
    for sid, want in value.items():
        here = f"{where}.{sid}"
        if key == "session_generations":
            if isinstance(want, bool) or not isinstance(want, int) or want < 1:
                fail("expected generation must be a positive int", here)
        elif key == "session_leaves":
            _check_leaves(want, components, fail, here)
        else:
            _check_slot(want, fail, here)


_EXAMPLE = {
    "session_generations": "{ s1 = 2 }",
    "session_leaves": "{ s1 = { full = [3] } }",
    "session_slots": "{ s1 = { holds_kv = true } }",
}


def _check_leaves(want, components, fail, here: str) -> None:
    if not isinstance(want, dict):
        fail("expected frontier must be a table {component = [node ids]} ({} for none)", here)
    for component, ids in want.items():
        if component not in components:
            fail(f"unknown component {shown(component)}; this cache has {', '.join(components)}", f"{here}.{component}")
        if not isinstance(ids, list) or not ids or not all(type(i) is int and i >= 0 for i in ids):
            fail("expected frontier must be a non-empty list of node ids (leave out a component that holds none)",
                 f"{here}.{component}")
        if ids != sorted(set(ids)):
            fail(f"list node ids once each, ascending: {sorted(set(ids))}", f"{here}.{component}")


def _check_slot(want, fail, here: str) -> None:
    if not isinstance(want, dict) or not want:
        fail(f"expected slot must be a table of its fields ({', '.join(SLOT_FIELDS)})", here)
    for field, value in want.items():
        kind = SLOT_FIELDS.get(field)
        if kind is None:
            fail(f"unknown slot field {shown(field)}; known: {', '.join(SLOT_FIELDS)}", f"{here}.{field}")
        if kind is list:
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        elif kind is int:
            ok = not isinstance(value, bool) and isinstance(value, int) and value >= 0
        else:
            ok = isinstance(value, bool)
        if not ok:
            what = {list: "a list of request names", int: "a non-negative int", bool: "true or false"}[kind]
            fail(f"expected {field} must be {what}", f"{here}.{field}")


# ---- reading the state after a step ------------------------------------------------------------
def observe_session_field(key: str, want: Any, state, cache) -> Any:
    """The actual value of a session field after a step: per-node refs from the
    timeline's ``state``, the rest from the live ``cache`` (read right after the step,
    as the timeline's records do not carry the sessions)."""
    from cache.controller.snapshot import sessions_view, streaming_sessions_view

    component = session_ref_component(key)
    if component is not None:
        i = state.components.index(component)
        out = {}
        for node in want:
            record = state.record(int(node))
            out[node] = NO_NODE if record is None else record.components[i].session_ref
        return out
    if key == "sessions_open":
        return sorted(cache.session_controller.sessions)
    if key == "session_slots":
        streaming = streaming_sessions_view(cache)
        slots = streaming.slots if streaming is not None else {}
        return {sid: _slot_fields(slots[sid], fields) if sid in slots else NO_SLOT for sid, fields in want.items()}
    view = sessions_view(cache)
    if key == "sessions_closed":
        return list(view.closed) if view is not None else []
    if key == "session_generations":
        generations = view.generations if view is not None else {}
        return {sid: generations.get(sid, NOT_OPEN) for sid in want}
    leaves = view.leaves if view is not None else {}
    return {sid: {c: list(ids) for c, ids in leaves.get(sid, {}).items()} for sid in want}


def _slot_fields(slot, fields: dict) -> dict:
    out = {}
    for field in fields:
        value = getattr(slot, field)
        out[field] = list(value) if isinstance(value, tuple) else value
    return out


def session_state(cache) -> dict[str, Any]:
    """The whole-value session fields as they stand (a pinned repro's expectations):
    the open sessions, and with the session radix cache the tombstones."""
    from cache.controller.snapshot import sessions_view

    out: dict[str, Any] = {"sessions_open": sorted(cache.session_controller.sessions)}
    view = sessions_view(cache)
    if view is not None:
        out["sessions_closed"] = list(view.closed)
    return out
