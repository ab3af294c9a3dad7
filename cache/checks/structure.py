"""The tree's own invariants for the full sweep: links and reachability, each node's
shape, the counters, the leaf set and the LRU lists. ``check_structure`` walks the
tree once and hands back the columns every later check (and each component's) reads."""

from __future__ import annotations

import operator

from ..basics.keys import child_key
from ..basics.violation import Violation
from ..tree.columns import NodeColumns


def check_structure(cache, out: list[Violation]) -> NodeColumns:
    """Links, then each node's own shape. Every later check walks exactly the reachable
    non-root nodes (each once, even if a corrupt link reaches one twice)."""
    tree = cache.tree
    root = tree.root
    ps = cache.page_size
    full = root.data[0]
    if full.value is None or full.value.shape[0] != 0 or root.key:
        out.append(Violation("root.shape", "root must have an empty key and an empty Full value"))
    for component in cache.components:
        if root.data[component.index].lock_ref < 1:
            out.append(Violation("root.lock", f"root {component.name} lock_ref must stay >= 1"))
    nodes, full_parents, arena_ok = _check_links(tree, out)
    cols = NodeColumns(nodes, len(cache.components), cache.device, full_parents, registered=arena_ok)
    if _shape_suspect(cols, ps):  # C-speed scans first; the per-node pass only when one trips
        names = [c.name for c in cache.components]
        for node in cols.nodes:
            _check_node_shape(node, ps, names, out)
    return cols


def _shape_suspect(cols: NodeColumns, ps: int) -> bool:
    """Some node may break a shape rule: a key not page-aligned or empty, a Full value
    missing or of another length (a missing one has length 0, which no key has, so
    that also covers aux data without Full), a negative lock, a lock above Full's."""
    lengths = cols.lengths
    if 0 in lengths or (ps > 1 and any(n % ps for n in lengths)):
        return True
    if any(map(operator.ne, cols.full_lengths, lengths)):
        return True
    flocks = cols.locks[0]
    return any(min(locks, default=0) < 0 or any(map(operator.gt, locks, flocks)) for locks in cols.locks)


def _check_node_shape(node, ps: int, names: list[str], out: list[Violation]) -> None:
    length = node.length
    if length == 0 or length % ps:
        out.append(Violation("key.page_aligned", f"node {node.id} key length {length} (page {ps})"))
    fcd = node.data[0]
    if fcd.value is None:
        if fcd.host_value is None:
            out.append(Violation("full.present", f"node {node.id} has no Full KV, on the device or the host"))
    elif fcd.value.shape[0] != length:
        out.append(Violation("full.value_len", f"node {node.id} Full value {fcd.value.shape[0]} != key {length}"))
    for i, name in enumerate(names):
        cd = node.data[i]
        if cd.lock_ref < 0:
            out.append(Violation("lock.negative", f"node {node.id} {name} lock_ref {cd.lock_ref}"))
        if i and cd.lock_ref > fcd.lock_ref:
            out.append(Violation("lock.full_dominates", f"node {node.id} {name} lock {cd.lock_ref} > full {fcd.lock_ref}"))
        if i and cd.value is not None and fcd.value is None:
            out.append(Violation("aux.implies_full", f"node {node.id} has {name} data without Full KV"))


def _check_links(tree, out: list[Violation]) -> tuple[list, set, bool]:
    """Parent links and child keys agree with the children dicts; every registered
    node is reachable from the root and nothing else is. Returns the reachable non-root
    nodes, the ids of nodes with a child that has Full KV (for the leaf set) and
    whether the reachable nodes are exactly the registered ones."""
    root, pb = tree.root, tree.page_bytes
    seen = set()
    full_parents = set()
    order = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.id in seen:
            out.append(Violation("tree.cycle", f"node {node.id} reached twice"))
            continue
        seen.add(node.id)
        order.append(node)
        for ck, child in node.children.items():
            if child.parent is not node:
                out.append(Violation("tree.parent", f"node {child.id}'s parent is not {node.id}"))
            extra = child.namespace  # keys.child_key, inlined for the common no-namespace case
            if ck != (child.key[:pb] if extra is None else child_key(child.key, 0, pb, extra)) or child.child_key != ck:
                out.append(Violation("tree.child_key", f"node {child.id} filed under the wrong child key"))
            if child.data[0].value is not None:
                full_parents.add(node.id)
            stack.append(child)
    arena_ok = seen == tree.nodes.keys()
    if not arena_ok:
        out.append(Violation("tree.arena", f"registered vs reachable differ: {sorted(set(tree.nodes) ^ seen)[:5]}"))
    return [n for n in order if n is not root], full_parents, arena_ok


def check_counters(cache, cols: NodeColumns, out: list[Violation]) -> None:
    """Each component's evictable / protected counters equal the sums over its nodes."""
    tree = cache.tree
    for component in cache.components:
        i = component.index
        values, locks = cols.values[i], cols.locks[i]
        if _counts_tokens(component):
            units = cols.lengths
        else:  # units per node from the component (a state slot: 1)
            unit = component.value_len
            units = [0 if v is None else unit(node) for node, v in zip(cols.nodes, values)]
        held = sum(n for n, v in zip(units, values) if v is not None)
        protected = sum(n for n, v, lock in zip(units, values, locks) if lock > 0 and v is not None)
        evictable = held - protected
        if tree.evictable[i] != evictable:
            out.append(Violation("counter.evictable", f"{component.name} evictable {tree.evictable[i]} != recomputed {evictable}"))
        if tree.protected[i] != protected:
            out.append(Violation("counter.protected", f"{component.name} protected {tree.protected[i]} != recomputed {protected}"))


def _counts_tokens(component) -> bool:
    """The component counts a node's key length (the default ``value_len``)."""
    from ..components.base import TreeComponent

    return type(component).value_len is TreeComponent.value_len


def check_leaf_set(cache, cols: NodeColumns, out: list[Violation]) -> None:
    """The leaf set holds exactly the evictable leaves (``tree.is_device_leaf``: Full KV,
    nothing locked, no child with Full KV), and the nodes' flags agree with it."""
    tree = cache.tree
    most_locked = cols.locks[0] if len(cols.locks) == 1 else map(max, *cols.locks)
    parents = cols.full_parents
    expected = {
        node_id
        for node_id, v, lock in zip(cols.ids, cols.values[0], most_locked)
        if lock <= 0 and v is not None and node_id not in parents
    }
    actual = {n.id for n in tree.leaves}
    if cols.registered:  # the flags of every registered node: the columns' nodes and the root
        flagged = {node_id for node_id, flag in zip(cols.ids, cols.in_leaf_set) if flag}
        if tree.root.in_leaf_set:
            flagged.add(tree.root.id)
    else:
        flagged = {n.id for n in tree.nodes.values() if n.in_leaf_set}
    if expected != actual:
        out.append(Violation("leaf_set", f"extra {sorted(actual - expected)[:5]}, missing {sorted(expected - actual)[:5]}"))
    if flagged != actual:
        out.append(Violation("leaf_set.flag", f"in_leaf_set flags disagree with the set: {sorted(flagged ^ actual)[:5]}"))


def check_lru_lists(cache, cols: NodeColumns, out: list[Violation]) -> None:
    tree = cache.tree
    for component in cache.components:
        if not component.uses_lru:
            continue
        lru = tree.lru[component.name]
        prev, s, tail = lru.head, lru.slot, lru.tail
        cur, ids, members = prev.lru_next[s], set(), 0
        add = ids.add
        for _ in range(len(tree.nodes) + 4):  # a loop in the links cannot run forever (+ 2 sentinels)
            if cur is tail or cur is None:
                break
            if cur.lru_prev[s] is not prev:
                out.append(Violation("lru.links", f"{component.name} LRU: broken prev link at node {cur.id}"))
                return
            if cur.id >= 0:  # not a session partition's sentinel (tree/session_lru.py)
                add(cur.id)
                members += 1
            prev, cur = cur, cur.lru_next[s]
        if cur is not tail:
            out.append(Violation("lru.links", f"{component.name} LRU: chain does not reach the tail"))
            return
        if members != lru.size or len(ids) != members:
            out.append(Violation("lru.size", f"{component.name} LRU size {lru.size}, walked {members}"))
        want = {node_id for node_id, v in zip(cols.ids, cols.values[component.index]) if v is not None}
        if ids != want:
            out.append(
                Violation(
                    "lru.vs_tree",
                    f"{component.name} LRU: only in list {sorted(ids - want)[:5]}, only in tree {sorted(want - ids)[:5]}",
                )
            )
