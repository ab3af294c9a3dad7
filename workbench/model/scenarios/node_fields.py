"""Expectable node state: per node and component what the bridge compares with SGLang,
so a scenario written from another source can pin it. Nodes are named by id or token
path (``node_refs.py``); the fields are made from the components listed, never
hard-coded:

* ``<component>_value_len = { "[1 2 3]" = 3, 7 = "tombstone" }`` — the node's value
  length in that component (``"tombstone"``: its data evicted, the node kept)
* ``<component>_lock_ref = { "[1 2 3]" = 1, m = 1 }`` — its lock_ref (keys: nodes, or
  match names, which read the node the match ended at)
* ``<component>_host_len = { "[1 2]" = 2 }`` — its host copy's length (``"no host copy"``)
* ``<component>_session_ref = { 7 = 1 }`` — the sessions holding it (session radix cache)
* ``hit_count = { … }``, ``priority = { … }`` — what Full's eviction policies read
* ``<component>_lru = ["[1 2]", 3]``, ``<component>_host_lru`` — a list, most recent first
* ``full_evict_order = ["[4 5]", "[1 2 3]"]`` — Full's evictable leaves in the order its
  eviction policy takes them (the base component's name, whatever it is)

Any node named may read ``"no node"``: the node is not in the tree. Tables compare only
the nodes listed, unless the step's ``exact`` names the field: then the nodes listed
must be all the nodes with a value of their own (every node for a value length, a host
copy for a host length, a nonzero count for the rest).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from ..ops.spec import BASE, host_parts, is_base
from .errors import ScenarioError, shown
from .node_refs import NO_NODE, NodePath, is_ref, parse_ref, resolve, same_node, spell

TOMBSTONE, NO_COPY = "tombstone", "no host copy"
EVICTED_MATCH = "node evicted"  # what a lock_ref keyed by a match reads once its node left the tree
EVICT_ORDER = f"{BASE}_evict_order"
NODE_FIELDS = ("hit_count", "priority")  # per node, not per component: the node's own fields
# per node and component: suffix -> the words a value may be besides an int
COMPONENT_TABLES = {"value_len": (TOMBSTONE,), "lock_ref": (), "host_len": (NO_COPY,), "session_ref": ()}


def _split(key: str, components) -> Optional[tuple[str, str]]:
    """(component, suffix) of a ``<component>_<suffix>`` field of a listed component."""
    for component in components:
        if key.startswith(f"{component}_"):
            return component, key[len(component) + 1:]
    return None


def table_component(key: str, components) -> Optional[tuple[Optional[str], str]]:
    """(component or None, what it reads) for a per-node table field, else None."""
    if key in NODE_FIELDS:
        return None, key
    split = _split(key, components)
    return split if split is not None and split[1] in COMPONENT_TABLES else None


def is_order_field(key: str, components) -> bool:
    split = _split(key, components)
    return key == EVICT_ORDER or (split is not None and split[1] in ("lru", "host_lru"))


def order_fields(components, host: bool = False) -> list[str]:
    """The node lists these components have: each LRU order (and the host tier's), Full's eviction order."""
    hosted = [c for c in host_parts(components) if not is_base(c)] if host else ()  # Full's host order is its leaves
    return [f"{c}_lru" for c in components] + [f"{c}_host_lru" for c in hosted] + [EVICT_ORDER]


def is_node_field(key: str, components) -> bool:
    return table_component(key, components) is not None or is_order_field(key, components)


# ---- checking a file's expectation ---------------------------------------------------------------
def check_node_expect(key: str, value: Any, names, exact: bool, name: str, line: Optional[int]) -> None:
    """Refuse a bad expected value with the file, line and field (ScenarioError)."""
    where = f"expect.{key}"

    def fail(message: str, field: str = where) -> None:
        raise ScenarioError(message, name, line, field)

    component, what = table_component(key, names.components) or _split(key, names.components) or (None, key)
    if what == "host_len" and (not names.host or component not in host_parts(names.components)):
        fail(f"{key} needs the host tier ([config] hicache) and a component with a host part")
    if what == "host_lru" and key not in order_fields(names.components, names.host):
        fail(f"{key} needs the host tier ([config] hicache); Full keeps no host LRU list, the other components"
             " with a host part do")
    if what == "session_ref" and not names.session_radix:
        fail(f"{key} needs the session radix cache ([config] session_radix_cache = true)")
    if is_order_field(key, names.components):
        if not isinstance(value, list):
            fail("expected value must be a list of nodes (ids or token paths like \"[1 2 3]\")")
        for i, ref in enumerate(value):
            _check_ref(ref, fail, f"{where}[{i}]")
        return
    if not isinstance(value, dict) or (not value and not exact):
        fail(f"must be a table {{node = {what}}} (nodes by id or token path: {{ \"[1 2 3]\" = 1 }};"
             " an empty one only with exact)")
    words = COMPONENT_TABLES.get(what, ()) + (NO_NODE,)
    for node, want in value.items():
        here = f"{where}.{node}"
        match_key = what == "lock_ref" and node in names.matches
        if what == "lock_ref" and not match_key and not is_ref(node):
            fail(f"unknown match name {shown(node)} (nor a node: an id, or a token path like \"[1 2 3]\")")
        if not match_key:
            _check_ref(node, fail, here)
        if isinstance(want, str) and want in words and not match_key:
            continue
        if isinstance(want, bool) or not isinstance(want, int) or (want < 0 and what != "priority"):
            also = "" if match_key else f" or {' or '.join(map(repr, words))}"
            fail(f"expected {what} must be {'an int' if what == 'priority' else 'a non-negative int'}{also}", here)


def _check_ref(ref: Any, fail: Callable, where: str) -> None:
    try:
        parse_ref(ref)
    except ValueError as exc:
        fail(str(exc), where)


# ---- reading the state after a step --------------------------------------------------------------
def observe_node_field(key: str, want: Any, state, exact: bool, match_node: Callable[[str], Optional[int]]) -> Any:
    """The actual value of a node field after a step, written as ``want`` is: its nodes
    spelled as the expectation spells them, so an equal state compares equal."""
    components = state.components
    if is_order_field(key, components):
        return _order(state, key, want)
    component, what = table_component(key, components)
    index = None if component is None else components.index(component)

    def read(node_id: Optional[int]) -> Any:
        record = None if node_id is None else state.record(node_id)
        if record is None:
            return NO_NODE
        if index is None:
            return getattr(record, what)
        value = getattr(record.components[index], what)
        return value if value is not None else COMPONENT_TABLES[what][0]

    out, seen, spelt = {}, set(), set()
    for node in want:
        node_id = match_node(node) if what == "lock_ref" else None
        if node_id is not None:  # a match name: the node it ended at
            out[node] = EVICTED_MATCH if node_id not in state else read(node_id)
        else:
            ref = parse_ref(node)
            spelt.add(type(ref))
            node_id = resolve(state, ref)
            out[node] = read(node_id)
        seen.add(node_id)
    if exact:  # every node with a value of its own, spelled as the listed ones are (paths by default)
        as_path = NodePath in spelt or int not in spelt
        for record in state.records.values():
            if record.parent is not None and record.id not in seen and _listed(record, what, index):
                out[str(spell(state, record.id, as_path, NO_NODE))] = read(record.id)
    return out


def _listed(record, what: str, index: Optional[int]) -> bool:
    """Whether ``exact`` wants the node listed: a value of its own (every node for a
    value length, a copy for a host length, a nonzero count for the rest)."""
    if what == "value_len":
        return True
    value = getattr(record, what) if index is None else getattr(record.components[index], what)
    return value is not None if what == "host_len" else value != 0


def _order(state, key: str, want: list) -> list:
    """The order as ``want`` names its nodes: ``want`` itself when it is the order."""
    ids = list(state.evictable_leaves if key == EVICT_ORDER else state.lru.get(key.removesuffix("_lru"), ()))
    resolved = [resolve(state, parse_ref(ref)) for ref in want]
    if resolved == ids:
        return list(want)
    as_path = any(isinstance(parse_ref(ref), NodePath) for ref in want)
    return [same_node(state, want[i], node, NO_NODE) if i < len(want) else spell(state, node, as_path, NO_NODE)
            for i, node in enumerate(ids)]


# ---- the docs' reference ---------------------------------------------------------------------
def reference_table() -> str:
    """The docs' table of the node and request fields, made from the registry
    (``urc ops --expect-markdown``)."""
    from cache.components import COMPONENT_REGISTRY

    from .request_fields import REQUEST_STATE, request_fields

    every = tuple(COMPONENT_REGISTRY)
    hosted = ", ".join(host_parts(every))
    aux_hosted = ", ".join(c for c in host_parts(every) if not is_base(c))
    rows = [
        ("`COMPONENT_value_len`", "nodes", f'its value\'s length; `"{TOMBSTONE}"`: data evicted, node kept'),
        ("`COMPONENT_lock_ref`", "nodes, match names", "its lock_ref (a match: the node it ended at)"),
        (f"`COMPONENT_host_len` ({hosted}; host tier)", "nodes", f'its host copy\'s length; `"{NO_COPY}"`'),
        ("`COMPONENT_session_ref` (session_radix_cache)", "nodes", "the sessions whose coverage holds it"),
        (", ".join(f"`{f}`" for f in NODE_FIELDS), "nodes", "what Full's eviction policies read"),
        ("`COMPONENT_lru`", "a list of nodes", "the LRU order, most recent first (Full: by access time)"),
        (f"`COMPONENT_host_lru` ({aux_hosted}; host tier)", "a list of nodes", "the host LRU order, most recent first"),
        (f"`{EVICT_ORDER}`", "a list of nodes", "Full's evictable leaves, in the order its eviction policy takes them"),
        (f"`{REQUEST_STATE}`", "request names", "a table of any of " + ", ".join(
            f"`{f}`" for f in request_fields(every)) + ' (`"not running"`)'),
        ("`exact`", "a list of table fields", "those tables list every key with a value (below)"),
    ]
    return "\n".join(["| field | keyed by | expected value |", "|---|---|---|"]
                     + [f"| {a} | {b} | {c} |" for a, b, c in rows])
