"""What changed between two states of a timeline, for a UI to highlight and `urc diff`.

``diff_states`` never compares whole trees: every node whose record differs between
the state after step a and the state after step b was touched by some step between
them, so it compares only the union of the store's deltas over that range — an
adjacent diff costs what the step changed. Pools and requests are the two states'
small globals. LRU ranks are derived (not stored), so a rank needs each state's
sorted order of LRU keys; it is built once per state and kept while the state lives,
and the neighbour's order is derived from it by moving only the changed nodes' keys,
so a walk step by step costs O(changes · log tree) plus a list copy.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections.abc import Mapping
from types import MappingProxyType
from typing import Optional

from cache.basics.keys import TOKEN_BYTES
from cache.observe.views import NodeRecord, PoolView

from .fmt import plural, tokens_text
from .packed import PackedTokens
from .states import TimelineState
from ..ops.spec import BASE, holds_states

CHANGE_KINDS = ("added", "removed", "split", "tombstoned", "recovered", "value", "lock_ref", "lru")
POOL_COUNTERS = ("total", "available", "evictable", "protected", "held")
PerNode = Mapping[int, tuple]  # node id -> (before, after)
EMPTY: Mapping = MappingProxyType({})


@dataclasses.dataclass(frozen=True)
class PoolDelta:
    name: str
    before: Optional[PoolView]  # None: the pool is not in that state
    after: Optional[PoolView]

    @property
    def counters(self) -> dict[str, tuple[int, int]]:
        """The counters that changed, in ``POOL_COUNTERS`` order: {counter: (before, after)}."""
        out = {}
        for name in POOL_COUNTERS:
            old = getattr(self.before, name) if self.before is not None else 0
            new = getattr(self.after, name) if self.after is not None else 0
            if old != new:
                out[name] = (old, new)
        return out


@dataclasses.dataclass(frozen=True)
class StateDiff:
    """From the state after step ``from_step`` to the state after step ``to_step``.
    Node tuples are sorted by id; per-component mappings hold only components with
    entries; ranks are 0 = most recent, None = not in that component's LRU order."""

    from_step: int
    to_step: int
    components: tuple[str, ...]
    added: tuple[int, ...]
    removed: tuple[int, ...]
    splits: tuple[tuple[int, int], ...]  # (new parent, child that existed with a longer key)
    unsplits: tuple[tuple[int, int], ...]  # (gone parent, child whose key grew back): a split stepped back over
    tombstoned: Mapping[str, tuple[int, ...]]  # component -> nodes whose value became a tombstone
    recovered: Mapping[str, tuple[int, ...]]  # component -> tombstones that got a value again
    values: Mapping[str, PerNode]  # component -> node -> (value_len before, after), both live
    locks: Mapping[str, PerNode]  # component -> node -> (lock_ref before, after)
    lru_moves: Mapping[str, PerNode]  # component -> node -> (rank before, after) of nodes in both states
    #   that moved themselves (their LRU key changed); nodes others merely passed are not listed
    moved_to_mru: Mapping[str, tuple[int, ...]]  # component -> the new or refreshed nodes now leading the
    #   order, MRU first (absent when that block is just the old order refreshed in place)
    pools: Mapping[str, PoolDelta]  # pools whose counters changed
    requests_started: tuple[str, ...]
    requests_finished: tuple[str, ...]
    records_before: Mapping[int, NodeRecord]  # every reported node present in the "from" state
    records_after: Mapping[int, NodeRecord]  # every reported node present in the "to" state
    node_kinds: Mapping[int, frozenset[str]]

    @property
    def ghosts(self) -> dict[int, NodeRecord]:
        """Removed nodes as they were before, so a view can draw where they stood."""
        return {node_id: self.records_before[node_id] for node_id in self.removed}

    def kinds(self, node_id: int) -> frozenset[str]:
        """The change kinds (``CHANGE_KINDS``) a renderer would highlight on this node."""
        return self.node_kinds.get(node_id, frozenset())

    @property
    def is_empty(self) -> bool:
        return not (self.node_kinds or self.pools or self.requests_started or self.requests_finished)


def diff_states(timeline, a: int, b: int) -> StateDiff:
    """What changed from the state after step ``a`` to the state after step ``b`` (either order)."""
    n = len(timeline)
    a, b = max(0, min(a, n)), max(0, min(b, n))
    old, new = timeline.state_after(a), timeline.state_after(b)
    changed: set[int] = set()
    for delta in timeline.store.deltas[min(a, b) + 1 : max(a, b) + 1]:
        changed.update(delta)
    before = {i: r for i in changed if (r := old.record(i)) is not None}
    after = {i: r for i in changed if (r := new.record(i)) is not None}
    added = sorted(after.keys() - before.keys())
    removed = sorted(before.keys() - after.keys())
    kinds: dict[int, set[str]] = {i: {"added"} for i in added} | {i: {"removed"} for i in removed}

    def mark(node_id: int, kind: str) -> None:
        kinds.setdefault(node_id, set()).add(kind)

    both = sorted(before.keys() & after.keys())
    splits = _splits(both, before, after, set(added))
    unsplits = _splits(both, after, before, set(removed))
    for parent, child in splits + unsplits:
        mark(parent, "split")
        mark(child, "split")

    comps = old.components
    found: dict[str, dict[str, dict]] = {"tombstoned": {}, "recovered": {}, "value": {}, "lock_ref": {}}

    def note(kind: str, name: str, node_id: int, pair: tuple) -> None:
        found[kind].setdefault(name, {})[node_id] = pair
        mark(node_id, kind)

    for node_id in both:
        rb, ra = before[node_id], after[node_id]
        if rb.components == ra.components:
            continue
        for name, cb, ca in zip(comps, rb.components, ra.components):
            if cb.value_len != ca.value_len:
                kind = "tombstoned" if ca.value_len is None else "recovered" if cb.value_len is None else "value"
                note(kind, name, node_id, (cb.value_len, ca.value_len))
            if cb.lock_ref != ca.lock_ref:
                note("lock_ref", name, node_id, (cb.lock_ref, ca.lock_ref))

    lru_moves, moved_to_mru = {}, {}
    for name in ((BASE, *old.shape.lru_components) if changed else ()):
        moves, front = _lru_changes(old, new, name, both, before, after)
        for node_id in moves:
            mark(node_id, "lru")
        if moves:
            lru_moves[name] = MappingProxyType(moves)
        if front:
            moved_to_mru[name] = front

    pools = {}
    for name in dict.fromkeys([*old.pools, *new.pools]):
        pb, pa = old.pools.get(name), new.pools.get(name)
        if pb != pa:
            pools[name] = PoolDelta(name, pb, pa)
    rids_before = {r.rid for r in old.requests}
    rids_after = {r.rid for r in new.requests}
    return StateDiff(
        a, b, comps, tuple(added), tuple(removed), tuple(splits), tuple(unsplits),
        _frozen({k: tuple(v) for k, v in found["tombstoned"].items()}),
        _frozen({k: tuple(v) for k, v in found["recovered"].items()}),
        _frozen({k: MappingProxyType(v) for k, v in found["value"].items()}),
        _frozen({k: MappingProxyType(v) for k, v in found["lock_ref"].items()}),
        _frozen(lru_moves), _frozen(moved_to_mru), _frozen(pools),
        tuple(r.rid for r in new.requests if r.rid not in rids_before),
        tuple(r.rid for r in old.requests if r.rid not in rids_after),
        _frozen({i: before[i] for i in sorted(kinds) if i in before}),
        _frozen({i: after[i] for i in sorted(kinds) if i in after}),
        _frozen({i: frozenset(kinds[i]) for i in sorted(kinds)}),
    )


def _frozen(mapping: dict) -> Mapping:
    return MappingProxyType(mapping) if mapping else EMPTY


def _splits(both: list[int], old: dict, new: dict, new_parents: set[int]) -> list[tuple[int, int]]:
    """(p, c): c is in both states, and in ``new`` its parent is one of ``new_parents``
    (nodes only ``new`` has) and its key is shorter than in ``old``."""
    out = []
    for node_id in both:
        rn = new[node_id]
        if rn.parent in new_parents and len(rn.key) < len(old[node_id].key):
            out.append((rn.parent, node_id))
    return out


# ---- LRU ranks -------------------------------------------------------------------------------

def _lru_changes(old: TimelineState, new: TimelineState, name: str, both, before, after):
    """Rank moves in one component of the nodes that moved themselves (their sort key
    changed: refreshed, relisted, dropped) — a node others merely passed keeps its key
    and is not reported — and the leading block of new or refreshed nodes, when that
    block is not just the old order refreshed in place. Across an LRU relabel (every
    label renumbered; rare) a changed rank is all there is to go by, so a node passed
    by a mover then counts as moved too."""
    order_new = new.sorted_order(name)  # the states keep these, patched from a neighbour's
    order_old = old.sorted_order(name)
    host = name.endswith("_host")  # a host LRU: its relabels follow the components'
    i = old.components.index(name.removesuffix("_host")) + (len(old.components) if host else 0)
    relabelled = name != BASE and old.globals.lru_relabels[i] != new.globals.lru_relabels[i]
    moves, refreshed = {}, set()
    for node_id in both:
        kb, ka = old.order_key(name, before[node_id]), new.order_key(name, after[node_id])
        if kb == ka:
            continue
        rank_before = None if kb is None else bisect_left(order_old, kb)
        rank_after = None if ka is None else bisect_left(order_new, ka)
        if rank_before != rank_after:
            moves[node_id] = (rank_before, rank_after)
        if not relabelled or rank_before != rank_after:  # a relabel changed every label, not every place
            refreshed.add(node_id)
    new_nodes = after.keys() - before.keys()
    front = []
    for _, node_id in order_new:
        if node_id not in refreshed and node_id not in new_nodes:
            break
        front.append(node_id)
    if not any(node_id in moves or node_id in new_nodes for node_id in front):
        front = []
    return moves, tuple(front)


# ---- text ------------------------------------------------------------------------------------


def diff_text(diff: StateDiff) -> list[str]:
    """One plain line per change, nodes as ``#id``: structure, then per component, then pools and requests."""
    lines = []
    split_children = {c for _, c in diff.splits + diff.unsplits}
    split_parents = {p for p, _ in diff.splits + diff.unsplits}
    lines += [f"#{p} split from #{c} (child keeps {_tokens(diff.records_after[c])})" for p, c in diff.splits]
    lines += [f"#{p} split undone: #{c} has {_tokens(diff.records_after[c])} again" for p, c in diff.unsplits]
    for node_id in diff.added:
        if node_id not in split_parents:
            record = diff.records_after[node_id]
            lines.append(f"#{node_id} added under #{record.parent} ({_tokens(record)})")
    for node_id in diff.removed:
        if node_id not in split_parents:
            record = diff.records_before[node_id]
            lines.append(f"#{node_id} removed from under #{record.parent} ({_tokens(record)})")
    for i, name in enumerate(diff.components):
        lines += [f"#{n} {name} tombstoned" for n in diff.tombstoned.get(name, ())]
        lines += [f"#{n} {name} recovered ({_units(name, diff.records_after[n].components[i].value_len)})"
                  for n in diff.recovered.get(name, ())]
        lines += [f"#{n} {name} value {old} → {_units(name, new)}"
                  for n, (old, new) in diff.values.get(name, {}).items() if n not in split_children]
        lines += [f"#{n} {name} lock_ref {old} → {new}" for n, (old, new) in diff.locks.get(name, {}).items()]
    for name in diff.components:
        front = diff.moved_to_mru.get(name, ())
        if front:
            lines.append(f"{name} LRU: {', '.join(f'#{n}' for n in front)} moved to the MRU end")
        explained = set(front) | set(diff.tombstoned.get(name, ())) | set(diff.recovered.get(name, ()))
        lines += [f"#{n} {name} LRU rank {_rank(old)} → {_rank(new)}"
                  for n, (old, new) in diff.lru_moves.get(name, {}).items() if n not in explained]
    for pool in diff.pools.values():
        lines.append(f"{pool.name} pool: " + ", ".join(f"{c} {o} → {n}" for c, (o, n) in pool.counters.items()))
    lines += [f"request {rid} started" for rid in diff.requests_started]
    lines += [f"request {rid} finished" for rid in diff.requests_finished]
    return lines


@dataclasses.dataclass(frozen=True)
class ChangeRow:
    """One thing that changed on one node, as a view shows it side by side: ``what``
    (``added``, ``key``, ``full lock_ref``, ``swa LRU rank`` …), its text before and after
    (None: the node is not there). ``before != after`` always."""

    node: int
    what: str
    before: Optional[str]
    after: Optional[str]


def change_rows(diff: StateDiff) -> tuple[ChangeRow, ...]:
    """The diff node by node (ascending ids), each node's rows only for what differs:
    a node added or removed is one row (its key); any other names its key and parent
    (a split), then per component its value, host copy and lock_ref, then its LRU ranks.
    An LRU-only step is its rank moves, never a node shown twice the same."""
    rows: list[ChangeRow] = []
    for node_id, kinds in diff.node_kinds.items():
        old, new = diff.records_before.get(node_id), diff.records_after.get(node_id)
        if old is None or new is None:
            what = "added" if old is None else "removed"
            rows.append(ChangeRow(node_id, what, _key_text(old), _key_text(new)))
            continue
        pairs = [("key", _key_text(old), _key_text(new)), ("parent", f"#{old.parent}", f"#{new.parent}")]
        for name, cb, ca in zip(diff.components, old.components, new.components):
            pairs += [(f"{name} value", _length(cb.value_len), _length(ca.value_len)),
                      (f"{name} host copy", _length(cb.host_len, "none"), _length(ca.host_len, "none")),
                      (f"{name} lock_ref", str(cb.lock_ref), str(ca.lock_ref))]
        for name, moves in diff.lru_moves.items():
            if node_id in moves:
                pairs.append((f"{name} LRU rank", *map(_rank, moves[node_id])))
        rows += [ChangeRow(node_id, what, b, a) for what, b, a in pairs if b != a]
    return tuple(rows)


def _key_text(record: Optional[NodeRecord]) -> Optional[str]:
    """``[1 2 3] (3 tokens)``: the key as every view elides it, counted once."""
    if record is None:
        return None
    tokens = PackedTokens(record.key)  # only the tokens shown are unpacked
    return f"{tokens_text(tokens, counted=False)} ({plural(len(tokens), 'token')})"


def _length(n: Optional[int], absent: str = "✝") -> str:
    return absent if n is None else str(n)


def diff_json(diff: StateDiff) -> dict:
    """The diff as plain JSON data (``urc diff --json``): node ids as numbers, per-node
    pairs as ``{"node": id, "before": x, "after": y}``."""
    def pairs(per_component: Mapping[str, PerNode]) -> dict:
        return {name: [{"node": n, "before": old, "after": new} for n, (old, new) in nodes.items()]
                for name, nodes in per_component.items()}

    return {
        "from_step": diff.from_step, "to_step": diff.to_step,
        "added": list(diff.added), "removed": list(diff.removed),
        "splits": [{"parent": p, "child": c} for p, c in diff.splits],
        "unsplits": [{"parent": p, "child": c} for p, c in diff.unsplits],
        "tombstoned": {k: list(v) for k, v in diff.tombstoned.items()},
        "recovered": {k: list(v) for k, v in diff.recovered.items()},
        "values": pairs(diff.values), "locks": pairs(diff.locks), "lru_moves": pairs(diff.lru_moves),
        "moved_to_mru": {k: list(v) for k, v in diff.moved_to_mru.items()},
        "pools": {name: {c: {"before": o, "after": n} for c, (o, n) in pool.counters.items()}
                  for name, pool in diff.pools.items()},
        "requests_started": list(diff.requests_started), "requests_finished": list(diff.requests_finished),
    }


def _tokens(record: NodeRecord) -> str:
    return plural(len(record.key) // TOKEN_BYTES, "token")


def _units(component: str, n: int) -> str:
    """A value's length in its component's unit: Mamba keeps one state slot per node."""
    return plural(n, "state slot") if holds_states(component) else plural(n, "token")


def _rank(rank: Optional[int]) -> str:
    return "none" if rank is None else f"r{rank}"
