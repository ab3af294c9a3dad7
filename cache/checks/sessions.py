"""The session radix cache's invariants (v0.5.23's validate_session_state, and more).

Every node's ``session_ref`` per component is recomputed from the leaf indexes and
each component's coverage, so a ref that leaked or went missing shows by name:

* session.ref_balance: a node's session_ref differs from what its sessions' frontiers
  cover (path, window or node);
* session.ref_negative: a session_ref below 0;
* session.leaf_unreachable: a leaf index names a node that left the tree;
* session.marker: a frontier without its marker, a marker not in the index, an empty
  marker set or an empty index entry;
* session.window_record: an SWA frontier without its covered length, or a covered
  length for a node that is not a frontier;
* session.closed: a closed session that still has a generation or frontiers;
* session.partition: a node on the wrong side of a session-partitioned LRU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..basics.violation import Violation
from ..tree.session_refs import covered_nodes

if TYPE_CHECKING:
    from ..controller.unified_radix_cache import UnifiedRadixCache


def check_sessions(cache: UnifiedRadixCache, out: list[Violation]) -> None:
    def report(name: str, message: str) -> None:
        out.append(Violation(name, message))

    tree = cache.tree
    refs = tree.session_refs
    live = {node for node in tree.nodes.values() if node is not tree.root}
    for name, index in refs.by_component.items():
        i = index.index
        expected: dict = {}
        for sid, leaves in index.leaves.items():
            if not leaves:
                report("session.marker", f"{name} session {sid!r} has an empty leaf index")
            covered = index.covered_len.get(sid, {})
            for leaf in leaves:
                if leaf not in live:
                    report("session.leaf_unreachable", f"{name} session {sid!r} indexes node {leaf.id}, not in the tree")
                    continue
                if sid not in (leaf.data[i].session_ids or ()):
                    report("session.marker", f"{name} session {sid!r} frontier {leaf.id} is missing its marker")
                for node in covered_nodes(index, leaf, covered.get(leaf)):
                    expected[node] = expected.get(node, 0) + 1
            if index.coverage == "window":
                for leaf in leaves:
                    if leaf not in covered:
                        report("session.window_record", f"{name} session {sid!r} frontier {leaf.id} has no covered length")
        for sid, covered in index.covered_len.items():
            for leaf, length in covered.items():
                if leaf not in index.leaves.get(sid, ()) or length <= 0:
                    report("session.window_record", f"{name} session {sid!r} node {leaf.id} covered_len={length}")
        for node in live:
            cd = node.data[i]
            if cd.session_ref < 0:
                report("session.ref_negative", f"node {node.id} {name} session_ref={cd.session_ref}")
            want = expected.get(node, 0)
            if cd.session_ref != want:
                report("session.ref_balance", f"node {node.id} {name} session_ref={cd.session_ref}, its sessions cover it {want} time(s)")
            if cd.session_ids is not None and not cd.session_ids:
                report("session.marker", f"node {node.id} {name} has an empty session_ids marker")
            for sid in cd.session_ids or ():
                if node not in index.leaves.get(sid, ()):
                    report("session.marker", f"node {node.id} {name} session {sid!r} marker is not indexed")
    for sid in refs.closed:
        if sid in refs.generations or any(sid in index.leaves for index in refs.by_component.values()):
            report("session.closed", f"closed session {sid!r} still holds a generation or frontiers")
    _check_partitions(cache, report)


def _check_partitions(cache, report) -> None:
    for name, lru in cache.tree.lru.items():
        if not getattr(lru, "partitioned", False):
            continue
        s, referenced = lru.slot, True
        cur = lru.head.lru_next[s]
        while cur is not lru.tail and cur is not None:
            if cur is lru.mid:
                referenced = False
            elif cur is not lru.cursor and lru.is_referenced(cur) != referenced:
                side = "referenced" if referenced else "unreferenced"
                report("session.partition", f"{name} LRU: node {cur.id} (session_ref={cur.data[s].session_ref}) on the {side} side")
            cur = cur.lru_next[s]


def sessions_ok(cache: UnifiedRadixCache) -> bool:
    """The per-step probe: the same check (its cost is the sessions' coverage)."""
    out: list = []
    check_sessions(cache, out)
    return not out
