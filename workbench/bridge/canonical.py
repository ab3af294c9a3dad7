"""One comparable form for both caches' state, and the first difference between two.

Node ids differ between the two implementations, so a node is named by what it
holds: its namespace and every token from the root to its end. Per node and
component: value length (None: a tombstone) and lock_ref; per node the hit count and
priority the eviction policies read; the evictable leaves, and in the order Full's
eviction policy takes them (SGLang keeps a heap built per walk: its order is the leaves
sorted by the policy's key, then access time); the LRU order of every other component
that keeps a list (MRU first); per pool (available, evictable, protected). ``nodes`` is None where a side cannot show its
nodes (SGLang's Rust tree core): then only the pools are compared.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional
from ..model.ops.spec import BASE

Ident = tuple  # (namespace: extra_key, or (extra_key, cache_salt) when salted; path tokens)


@dataclasses.dataclass(frozen=True)
class NodeState:
    tokens: int  # the node's own edge length
    id: int  # that side's node id (for the report only, never compared)
    components: dict[str, tuple[Optional[int], int]]  # name -> (value length or None, lock_ref)
    host: dict[str, Optional[int]] = dataclasses.field(default_factory=dict)  # host tier: name -> host copy length
    # session radix cache: name -> (session_ref, the sessions whose frontier it is), where either is set
    sessions: dict[str, tuple[int, tuple[str, ...]]] = dataclasses.field(default_factory=dict)
    policy: tuple = ()  # what eviction policies read (cache/tree/leaf_policies.py): (hit_count, priority)


@dataclasses.dataclass(frozen=True)
class CanonicalState:
    nodes: Optional[dict[Ident, NodeState]]
    evictable_leaves: Optional[frozenset]
    lru: dict[str, tuple[Ident, ...]]
    pools: dict[str, tuple[int, int, int]]  # name -> (available, evictable, protected)
    host_pools: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # host tier: (available, total)
    # sessions: generations, closed tombstones (oldest first), the controller's sessions, streaming slots
    sessions: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Full's evictable leaves in the order its eviction policy takes them (None: not shown)
    evict_order: Optional[tuple[Ident, ...]] = None


@dataclasses.dataclass(frozen=True)
class Difference:
    field: str  # e.g. "pools.swa.available", "node.swa.lock_ref", "lru.mamba"
    ours: Any
    theirs: Any
    where: str = ""  # the node it concerns, in words

    def as_dict(self) -> dict:
        return {"field": self.field, "ours": _plain(self.ours), "sglang": _plain(self.theirs), "where": self.where}


POOL_FIELDS = ("available", "evictable", "protected")
HOST_POOL_FIELDS = ("available", "total")


def from_snapshot(snapshot, components: list[str]) -> CanonicalState:
    """Our cache's state, read from its inspection snapshot."""
    nodes: dict[Ident, NodeState] = {}
    ident_of: dict[int, Ident] = {}
    hosted = "full_host" in snapshot.pools  # the host tier
    raw_paths: dict[int, tuple[int, ...]] = {}  # the tokens a user typed from the root (bigram keys: one more)
    for view in snapshot.nodes[1:]:
        above = raw_paths.get(view.parent, ())
        raw_paths[view.id] = above + view.raw_key if not above or view.key_head is None else above + view.key
        namespace = view.extra_key if view.cache_salt is None else (view.extra_key, view.cache_salt)
        ident = (namespace, raw_paths[view.id])
        ident_of[view.id] = ident
        comps = {name: (view.components[name].value_len, view.components[name].lock_ref) for name in components}
        host = {name: view.components[name].host_len for name in components} if hosted else {}
        tagged = {name: (c.session_ref, c.session_ids) for name in components
                  if ((c := view.components[name]).session_ref, c.session_ids) != (0, ())}
        nodes[ident] = NodeState(len(view.key), view.id, comps, host, tagged, (view.hit_count, view.priority))
    leaves = frozenset(ident_of[i] for i in snapshot.evictable_leaves)
    evict_order = tuple(ident_of[i] for i in snapshot.evictable_leaves)
    lru = {name: tuple(ident_of[i] for i in snapshot.lru[name]) for name in components if name != BASE}
    lru.update((f"{name}_host", tuple(ident_of[i] for i in snapshot.lru[f"{name}_host"]))  # the host tier's
               for name in components if f"{name}_host" in snapshot.lru)
    pools = {name: (p.available, p.evictable, p.protected) for name, p in snapshot.pools.items() if name in components}
    host_pools = {name: (p.available, p.total) for name in components
                  if (p := snapshot.pools.get(f"{name}_host")) is not None}
    return CanonicalState(nodes, leaves, lru, pools, host_pools, _sessions(snapshot, ident_of), evict_order)


def _sessions(snapshot, ident_of: dict[int, Ident]) -> dict[str, Any]:
    """Our session bookkeeping in the form SGLangSide._sessions_state gives SGLang's."""
    refs, streaming = snapshot.sessions, snapshot.streaming_sessions
    parts: dict[str, Any] = {}
    if refs is not None:
        parts["generations"] = tuple(sorted(refs.generations.items()))
        parts["closed"] = refs.closed
        parts["leaves"] = tuple(sorted(((sid, name, ident_of[node]) for sid, per in refs.leaves.items()
                                        for name, ids in per.items() for node in ids), key=leaf_order))
    if streaming is not None:
        parts["controller"] = tuple(sorted((sid, s.streaming, s.inflight, s.close_on_finish)
                                           for sid, s in streaming.controller.items()))
        parts["slots"] = tuple(sorted(
            (sid, s.holds_kv, s.cache_protected_len, s.kv_committed_len, s.kv_allocated_len, s.publishes_prompt,
             None if s.lock_node is None else ident_of.get(s.lock_node, "root"))
            for sid, s in streaming.slots.items()))
    return {part: value for part, value in parts.items() if value}


def leaf_order(leaf: tuple) -> tuple:
    """(session, component, ident) in an order that holds across namespaces of every
    form (None, an extra_key, an (extra_key, cache_salt) pair)."""
    sid, name, (namespace, path) = leaf
    return (sid, name, repr(namespace), path)


def describe(ident: Ident) -> str:
    """A node in words: where its path ends and its last tokens."""
    extra, path = ident
    tail = ", ".join(map(str, path[-4:]))
    space = f" in namespace {extra!r}" if extra is not None else ""
    return f"the node ending at token {len(path)} (…{tail}){space}"


def first_difference(ours: CanonicalState, theirs: CanonicalState) -> Optional[Difference]:
    """The first field where the two states differ (pools, then nodes, leaves, LRU
    lists), or None. Nodes are compared only when both sides show them."""
    for label, fields, mine, other in (("pools", POOL_FIELDS, ours.pools, theirs.pools),
                                       ("host_pools", HOST_POOL_FIELDS, ours.host_pools, theirs.host_pools)):
        for name in sorted(set(mine) | set(other)):
            a, b = mine.get(name), other.get(name)
            if a is None or b is None:
                return Difference(f"{label}.{name}", a, b)
            for field, x, y in zip(fields, a, b):
                if x != y:
                    return Difference(f"{label}.{name}.{field}", x, y)
    if ours.nodes is None or theirs.nodes is None:
        return None
    only_ours = [i for i in ours.nodes if i not in theirs.nodes]
    only_theirs = [i for i in theirs.nodes if i not in ours.nodes]
    if only_ours or only_theirs:
        first = min(only_ours + only_theirs, key=lambda i: (len(i[1]), i[1]))
        side = "ours" if first in ours.nodes else "SGLang"
        return Difference("nodes", len(ours.nodes), len(theirs.nodes), f"{describe(first)} exists only in {side}")
    for ident in sorted(ours.nodes, key=lambda i: (len(i[1]), i[1])):
        a, b = ours.nodes[ident], theirs.nodes[ident]
        for name in a.components:
            (len_a, lock_a), (len_b, lock_b) = a.components[name], b.components.get(name, (None, 0))
            where = f"{describe(ident)} (ours #{a.id}, SGLang #{b.id})"
            if len_a != len_b:
                return Difference(f"node.{name}.value_len", len_a, len_b, where)
            if lock_a != lock_b:
                return Difference(f"node.{name}.lock_ref", lock_a, lock_b, where)
            if a.host.get(name) != b.host.get(name):
                return Difference(f"node.{name}.host_len", a.host.get(name), b.host.get(name), where)
            if a.sessions.get(name) != b.sessions.get(name):  # (session_ref, frontier of) or None: no session
                return Difference(f"node.{name}.session", a.sessions.get(name), b.sessions.get(name), where)
        for field, x, y in zip(("hit_count", "priority"), a.policy, b.policy):
            if x != y:
                return Difference(f"node.{field}", x, y, f"{describe(ident)} (ours #{a.id}, SGLang #{b.id})")
    if ours.evictable_leaves != theirs.evictable_leaves:
        extra = sorted(ours.evictable_leaves ^ theirs.evictable_leaves, key=lambda i: (len(i[1]), i[1]))[0]
        side = "ours" if extra in ours.evictable_leaves else "SGLang"
        return Difference("evictable_leaves", len(ours.evictable_leaves), len(theirs.evictable_leaves),
                          f"{describe(extra)} is an evictable leaf only in {side}")
    if ours.evict_order is not None and theirs.evict_order is not None and ours.evict_order != theirs.evict_order:
        a, b = ours.evict_order, theirs.evict_order
        k = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return Difference("full_evict_order", [_short(i, ours) for i in a], [_short(i, theirs) for i in b],
                          f"position {k} (0 = evicted first)")
    for name in sorted(set(ours.lru) | set(theirs.lru)):
        a, b = ours.lru.get(name, ()), theirs.lru.get(name, ())
        if a != b:
            k = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            where = f"position {k} (0 = most recent)"
            return Difference(f"lru.{name}", [_short(i, ours) for i in a], [_short(i, theirs) for i in b], where)
    for part in sorted(set(ours.sessions) | set(theirs.sessions)):
        a, b = ours.sessions.get(part), theirs.sessions.get(part)
        if a != b:
            return Difference(f"sessions.{part}", _plain(a), _plain(b))
    return None


def _short(ident: Ident, state: CanonicalState) -> str:
    node = state.nodes.get(ident) if state.nodes else None
    return f"@{len(ident[1])}" + (f"#{node.id}" if node else "")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def node_ident(namespace, node, root, tokens) -> tuple:
    """A node by its namespace (the extra_key, or (extra_key, cache_salt)
    when salted: nodes of two salts may share a path) and its path's tokens."""
    path = []
    while node is not root:
        path[:0] = tokens(node)
        node = node.parent
    return (namespace, tuple(path))


def our_tokens(root):
    """``node_ident``'s tokens of one of our nodes: the tokens a user typed (an EAGLE
    root child adds the token its first pair begins with, as the canonical state does)."""
    from cache.basics.keys import namespace_parts

    def tokens(node) -> tuple:
        head = namespace_parts(node.namespace).bigram_head if node.parent is root else None
        return tuple(node.token_ids) if head is None else (head, *node.token_ids)
    return tokens


def their_tokens(root):
    """``node_ident``'s tokens of an SGLang node: its raw tokens, less the first below the
    root on a bigram key (the token its parent's last pair ends with)."""
    def tokens(node) -> tuple:
        raw = tuple(node.key.raw_token_ids())
        return raw[1:] if node.key.is_bigram and node.parent is not root else raw
    return tokens
