"""Locks against the receipts that account for them: what every held receipt locks
(``expected_locks``, shared by the sweep and the per-step probe), receipts anchored on
live nodes, and every lock_ref equal to what the receipts account for."""

from __future__ import annotations

from typing import Optional

from ..basics.violation import Violation
from ..tree.columns import NodeColumns
from ..tree.locks import fresh_groups


def expected_locks(cache, out: Optional[list[Violation]] = None, groups: Optional[dict] = None) -> list[dict[int, int]]:
    """Per component index: node id -> the lock_ref its held receipts account for.
    A receipt whose segment cannot be found is reported (or, without ``out``, raises).
    ``groups``: the receipts filed by ``lock_group_key`` (the per-step probe passes the
    tree's ``held_lock_groups()``); by default filed afresh from ``live_receipts``.
    Each group's nodes are found once and counted once per receipt in it."""
    tree = cache.tree
    if groups is None:
        groups = fresh_groups(tree)
    expected: list[dict[int, int]] = [{} for _ in cache.components]
    for group in groups.values():
        receipt = next(iter(group.values()))
        anchor = tree.nodes.get(receipt.node_id)
        if anchor is None:
            continue
        weight = len(group)
        for component in cache.components:
            if not tree.releases(component, receipt, receipt.swa_released):
                continue
            try:
                nodes = component.locked_nodes(anchor, receipt)
            except LookupError as exc:
                if out is None:
                    raise
                out.extend(Violation("lock.receipt_segment", f"receipt {r}: {exc}") for r in group)
                continue
            counts = expected[component.index]
            for node in nodes:
                counts[node.id] = counts.get(node.id, 0) + weight
    return expected


def check_receipts(cache, out: list[Violation]) -> None:
    for receipt_id, receipt in cache.tree.live_receipts.items():
        node_id = receipt.node_id
        if node_id not in cache.tree.nodes:
            out.append(Violation("lock.receipt_dangling", f"receipt {receipt_id} anchored on deleted node {node_id}"))


def check_lock_counts(cache, cols: NodeColumns, out: list[Violation]) -> None:
    """Every lock_ref equals what the held receipts account for (the root: 1)."""
    tree = cache.tree
    expected = expected_locks(cache, out)
    root = tree.root
    if not cols.registered:
        cols = NodeColumns.of_tree(tree)
    for component in cache.components:
        i, counts = component.index, expected[component.index]
        wrong = [(node_id, lock) for node_id, lock in zip(cols.ids, cols.locks[i]) if lock != counts.get(node_id, 0)]
        if root.data[i].lock_ref != 1:
            wrong.insert(0, (root.id, root.data[i].lock_ref))
        for node_id, have in wrong:
            want = 1 if node_id == root.id else counts.get(node_id, 0)
            out.append(
                Violation("lock.unaccounted", f"node {node_id} {component.name} lock_ref {have}, held receipts account for {want}")
            )
