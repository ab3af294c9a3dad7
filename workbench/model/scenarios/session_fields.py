"""Expectable session state: what a step may ``expect`` of the session radix cache, the
session controller and the streaming slots, checked when the file loads and read after
the step runs. (Per node, ``<component>_session_ref`` is a node field: node_fields.py.)

* ``sessions_open = ["s1", "s2"]`` — the controller's open sessions, in name order
* ``session_generations = { s1 = 2 }`` — each listed session's current generation
* ``sessions_closed = ["s1"]`` — the closed-session tombstones, oldest close first
* ``session_leaves = { s1 = { full = [3], swa = ["[1 2 3]"] } }`` — a listed session's
  frontier per component (nodes by id or token path; a component holding none is left
  out, ``{}``: none)
* ``session_slots = { s1 = { holds_kv = true, kv_committed_len = 6 } }`` — the listed
  fields of a listed session's streaming slot (``"no slot"`` when it holds none)

Tables are partial (only the sessions and slot fields listed are compared) unless the
step's ``exact`` names them; lists are whole. Generations, tombstones and leaves need
``[config] session_radix_cache = true``; without it they would only ever read empty.
"""

from __future__ import annotations

from typing import Any, Optional

from .errors import ScenarioError, shown
from .node_refs import NO_NODE, NodePath, is_ref, parse_ref, resolve, same_node, spell

REFS_FIELDS = ("session_generations", "sessions_closed", "session_leaves")  # need session_radix_cache
SESSION_FIELDS = ("sessions_open", "session_slots") + REFS_FIELDS
SLOT_FIELDS = {  # SlotView's fields and the values each takes
    "holds_kv": bool, "cache_protected_len": int, "kv_committed_len": int, "kv_allocated_len": int,
    "lock_node": "node", "publishes_prompt": bool, "borrowed_by": list,
}
NOT_OPEN, NO_SLOT = "not open", "no slot"
SESSION_TABLES = ("session_generations", "session_leaves", "session_slots")  # keyed by session: exact applies


def is_session_field(key: str) -> bool:
    return key in SESSION_FIELDS


def check_session_expect(key: str, value: Any, components, session_radix: bool, name: str,
                         line: Optional[int], exact: bool = False) -> None:
    """Refuse a bad expected value with the file, line and field (ScenarioError)."""
    where = f"expect.{key}"

    def fail(message: str, field: str = where) -> None:
        raise ScenarioError(message, name, line, field)

    if key in REFS_FIELDS and not session_radix:
        fail(f"{key} needs the session radix cache ([config] session_radix_cache = true)")
    if key in ("sessions_open", "sessions_closed"):
        if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
            fail("expected value must be a list of session ids (strings)")
        if len(set(value)) != len(value):
            fail("a session is listed twice")
        if key == "sessions_open" and value != sorted(value):
            fail(f"list the open sessions in name order: {shown(sorted(value))}")
        return
    if not isinstance(value, dict) or (not value and not exact):
        fail(f"must be a table {{session_id = …}} ({_EXAMPLE[key]}); an empty one only with exact")
    for sid, want in value.items():
        here = f"{where}.{sid}"
        if key == "session_generations":
            if want != NOT_OPEN and (isinstance(want, bool) or not isinstance(want, int) or want < 1):
                fail(f"expected generation must be a positive int or {NOT_OPEN!r}", here)
        elif key == "session_leaves":
            _check_leaves(want, components, fail, here)
        elif want != NO_SLOT:
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
        if not isinstance(ids, list) or not ids:
            fail("expected frontier must be a non-empty list of nodes (leave out a component that holds none)",
                 f"{here}.{component}")
        for node in ids:
            try:
                parse_ref(node)
            except ValueError as exc:
                fail(str(exc), f"{here}.{component}")
        if all(type(i) is int for i in ids) and ids != sorted(set(ids)):
            fail(f"list node ids once each, ascending: {sorted(set(ids))}", f"{here}.{component}")


def _check_slot(want, fail, here: str) -> None:
    if not isinstance(want, dict) or not want:
        fail(f"expected slot must be a table of its fields ({', '.join(SLOT_FIELDS)})", here)
    for field, value in want.items():
        kind = SLOT_FIELDS.get(field)
        if kind is None:
            fail(f"unknown slot field {shown(field)}; known: {', '.join(SLOT_FIELDS)}", f"{here}.{field}")
        if kind == "node":
            ok = is_ref(value)
        elif kind is list:
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        elif kind is int:
            ok = not isinstance(value, bool) and isinstance(value, int) and value >= 0
        else:
            ok = isinstance(value, bool)
        if not ok:
            what = {list: "a list of request names", int: "a non-negative int", bool: "true or false",
                    "node": "a node (an id, or a token path like \"[1 2 3]\")"}[kind]
            fail(f"expected {field} must be {what}", f"{here}.{field}")


# ---- reading the state after a step ------------------------------------------------------------
def observe_session_field(key: str, want: Any, state, cache, exact: bool = False) -> Any:
    """The actual value of a session field after a step, read from the live ``cache``
    right after the step; nodes are spelled as ``want`` spells them, so an equal state
    compares equal. With ``exact`` a table adds every session it does not list."""
    from cache.controller.snapshot import sessions_view, streaming_sessions_view

    if key == "sessions_open":
        return sorted(cache.session_controller.sessions)
    if key == "session_slots":
        streaming = streaming_sessions_view(cache)
        slots = streaming.slots if streaming is not None else {}
        out = {sid: _slot_fields(state, slots[sid], fields) if sid in slots else NO_SLOT
               for sid, fields in want.items()}
        everyone = slots
    else:
        view = sessions_view(cache)
        if key == "sessions_closed":
            return list(view.closed) if view is not None else []
        if key == "session_generations":
            everyone = view.generations if view is not None else {}
            out = {sid: everyone.get(sid, NOT_OPEN) for sid in want}
        else:
            everyone = view.leaves if view is not None else {}
            out = {sid: _frontier(state, everyone.get(sid, {}), want[sid]) for sid in want}
    if exact:
        shape = next((fields for fields in want.values() if isinstance(fields, dict)), {})
        for sid in everyone:
            if sid not in out:
                out[sid] = observe_session_field(key, {sid: shape}, state, cache)[sid]
    return out


def _frontier(state, leaves, want: Any) -> dict:
    """A session's frontier per component, its nodes spelled as ``want`` spells them:
    node ids ascending, or the paths, in the order listed when they are the same nodes."""
    out = {}
    for component, ids in leaves.items():
        listed = want.get(component, []) if isinstance(want, dict) else []
        refs = [parse_ref(ref) for ref in listed]
        if sorted(ids) == sorted(n for n in (resolve(state, ref) for ref in refs) if n is not None) \
                and len(refs) == len(ids):
            out[component] = list(listed)
        else:
            as_path = any(isinstance(ref, NodePath) for ref in refs)
            out[component] = [spell(state, node, as_path, NO_NODE) for node in sorted(ids)]
    return out


def _slot_fields(state, slot, fields: dict) -> dict:
    out = {}
    for field in fields:
        value = getattr(slot, field)
        if field == "lock_node" and value is not None:
            value = same_node(state, fields[field], value, NO_NODE)
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
