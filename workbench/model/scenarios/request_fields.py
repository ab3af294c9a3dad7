"""Expectable request state: ``request_state = { r1 = { cache_protected_len = 4,
kv_committed_len = 6, last_node = "[1 2 3 4]" } }`` pins the listed fields of a listed
running request, by the names SGLang's ``Req`` gives them, so a converted SGLang test
or oracle trace reads as it was written. A component adds the request fields its folder
declares (``REQUEST_FIELDS``) as ``<component>_<field>``: ``swa_evicted_seqlen``.
A request that is not running reads ``"not running"``; a field the request has no
value for, ``"none"``.
"""

from __future__ import annotations

from typing import Any, Optional

from cache.components import COMPONENT_REGISTRY  # names and folder facts only: no torch

from .errors import ScenarioError, shown
from .node_refs import parse_ref, resolve, same_node

REQUEST_STATE = "request_state"
NOT_RUNNING, NONE = "not running", "none"
NODE, COUNT = "node", "count"
# RequestView's fields, as SGLang names them -> (the view's field, what a value is)
VIEW_FIELDS = {
    "cache_protected_len": ("cache_protected_len", COUNT),
    "kv_committed_len": ("tokens", COUNT),
    "last_node": ("last_node", NODE),
    "last_node_depth": ("last_node", "depth"),
    "lock_node": ("lock_node", NODE),
}


def request_fields(components) -> dict[str, tuple[str, str]]:
    """Every field a request may be expected to have with these components."""
    out = dict(VIEW_FIELDS)
    for component in components:
        if component in COMPONENT_REGISTRY:
            for field in COMPONENT_REGISTRY.declared(component, "REQUEST_FIELDS", ()):
                out[f"{component}_{field}"] = (f"{component}.{field}", COUNT)
    return out


def check_request_expect(value: Any, names, exact: bool, name: str, line: Optional[int]) -> None:
    """Refuse a bad expected value with the file, line and field (ScenarioError)."""
    where = f"expect.{REQUEST_STATE}"
    fields = request_fields(names.components)
    if not isinstance(value, dict) or (not value and not exact):
        raise ScenarioError("must be a table {request = {field = value}} ({ r1 = { kv_committed_len = 6 } };"
                            " an empty one only with exact)", name, line, where)
    known = set(names.live["requests"]) | names.ended["requests"]
    for rid, want in value.items():
        here = f"{where}.{rid}"
        if rid not in known:
            raise ScenarioError(f"unknown request {shown(rid)}", name, line, here)
        if want == NOT_RUNNING:
            continue
        if not isinstance(want, dict) or not want:
            raise ScenarioError(f"expected request must be a table of its fields ({', '.join(fields)})"
                                f" or {NOT_RUNNING!r}", name, line, here)
        for field, expected in want.items():
            kind = fields.get(field, (None, None))[1]
            if kind is None:
                raise ScenarioError(f"unknown request field {shown(field)}; known: {', '.join(fields)}", name, line,
                                    f"{here}.{field}")
            if kind == NODE and expected != NONE:
                try:
                    parse_ref(expected)
                except ValueError as exc:
                    raise ScenarioError(str(exc), name, line, f"{here}.{field}") from None
            elif kind != NODE and expected != NONE and (isinstance(expected, bool) or not isinstance(expected, int) or expected < 0):
                raise ScenarioError(f"expected {field} must be a non-negative int or {NONE!r}", name, line,
                                    f"{here}.{field}")


def observe_request_state(want: dict, state, exact: bool) -> dict:
    """The listed fields of each listed request as they stand (and, with ``exact``,
    every other running request with the same fields)."""
    running = {view.rid: view for view in state.requests}
    fields = request_fields(state.components)
    out = {}
    for rid, asked in want.items():
        view = running.get(rid)
        out[rid] = NOT_RUNNING if view is None else (
            {field: _read(state, view, field, fields[field], w) for field, w in asked.items()}
            if isinstance(asked, dict) else _whole(state, view, fields))
    if exact:
        shape = next((asked for asked in want.values() if isinstance(asked, dict)), None)
        for rid, view in running.items():
            if rid not in want:
                out[rid] = _whole(state, view, fields) if shape is None else {
                    field: _read(state, view, field, fields[field], None) for field in shape}
    return out


def _whole(state, view, fields: dict) -> dict:
    return {field: _read(state, view, field, fields[field], None) for field in fields}


def _read(state, view, field: str, how: tuple[str, str], want: Any) -> Any:
    source, kind = how
    if "." in source:
        component, _, name = source.partition(".")
        value = view.component(component).get(name)
    else:
        value = getattr(view, source)
    if kind == NODE:
        return same_node(state, want, value, NONE) if value is not None else NONE
    if kind == "depth":
        node = resolve(state, value) if value is not None else None
        return len(state.path(node)) if node is not None else NONE
    return NONE if value is None else value
