"""Invariants of the host tier (HiCache): host copies are whole and disjoint, the host
pool hands out exactly the slots the nodes hold, device nodes sit above host-only ones,
under write-through a host copy's parent has one too, the host-leaf set is exactly
the host-only, unlocked, childless nodes, and every node
in a transfer held in flight is locked for it (device; a load's also on the host). With
a storage tier: a store in flight has a host copy and host-locks its node (and the
parts split off above it), its keys were the node's page hashes, an immediate store
never outlives its op, and every Full host lock is a store's or a held load's."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..basics.base_component import FULL
from ..basics.violation import Violation
from ..tree.columns import NodeColumns
from . import component_checks

if TYPE_CHECKING:
    from ..controller.unified_radix_cache import UnifiedRadixCache


def check_host_tier(cache: UnifiedRadixCache, cols: NodeColumns, out: list[Violation]) -> None:
    tree, host = cache.tree, cache.host
    ps = cache.page_size
    copies, pages = [], 0
    for node in cols.nodes:
        cd = node.data[0]
        if cd.host_value is not None:
            if cd.host_value.shape[0] != node.length:
                out.append(Violation("host.value_len", f"node {node.id} host copy {cd.host_value.shape[0]} != key {node.length}"))
            copies.append(cd.host_value)
            pages += -(-node.length // ps)
        parent = node.parent
        if cd.value is not None and parent is not tree.root and parent.data[0].value is None:
            out.append(Violation("host.device_above", f"node {node.id} has device KV under host-only node {parent.id}"))
        if _chain_broken(tree, node):
            out.append(Violation("host.backup_chain", f"node {node.id} has a host copy under node {parent.id}, which "
                                 "has none (write-through backs up from the root down)"))
        if cd.value is None and cd.lock_ref > 0:
            out.append(Violation("host.locked_host_only", f"host-only node {node.id} holds a device lock"))
    held = sum(node.length for node in cols.nodes if node.data[0].host_value is not None)
    if tree.host_held != held:
        out.append(Violation("host.counter", f"host tokens held {tree.host_held} != recomputed {held}"))
    used = host.kv.size - host.kv.available_size()
    backups = _backups(cache)
    kept = backups.get(FULL, [])
    held_by_backups = sum(int(b.shape[0]) for b in kept)
    fetching = _prefetch_rows(cache)
    if used != pages * ps + held_by_backups + fetching:
        out.append(Violation("host.pool_balance", f"host pool hands out {used} slots, the nodes hold {pages * ps}"
                             + (f" and retraction backups {held_by_backups}" if kept else "")
                             + (f" and prefetches in flight {fetching}" if fetching else "")))
    copies = copies + kept
    if copies:
        slots = torch.cat(copies) if len(copies) > 1 else copies[0]
        if torch.unique(slots).shape[0] != slots.shape[0]:
            out.append(Violation("host.shared_slots", "two host copies share a host slot"))
    _check_transfers(cache, cols, out)
    _check_stores(cache, cols, out)
    if cache.host.storage is not None:
        out.extend(Violation("storage.prefetch", problem) for problem in cache.host.storage.prefetch.check())
    _check_aux_copies(cache, cols, out)
    expected = {n.id for n in cols.nodes if tree.is_host_leaf(n)}
    actual = {n.id for n in tree.host_leaves}
    if expected != actual:
        out.append(Violation("host.leaf_set", f"extra {sorted(actual - expected)[:5]}, missing {sorted(expected - actual)[:5]}"))


def _check_transfers(cache: UnifiedRadixCache, cols: NodeColumns, out: list[Violation]) -> None:
    open_marks = {t.mark: t for t in cache.host.in_flight}
    for transfer in cache.host.in_flight:
        if cache.tree.nodes.get(transfer.node.id) is not transfer.node:
            out.append(Violation("host.transfer", f"{transfer.kind} {transfer.ack} in flight on node "
                                 f"{transfer.node.id}, which left the tree"))
    for node in cols.nodes:
        cd = node.data[0]
        mark = cd.metadata.get("transfer")
        if mark is None:
            continue
        if mark not in open_marks:
            out.append(Violation("host.transfer", f"node {node.id} is marked in a {mark[0]} that is no longer in flight"))
        elif not cache.host.held:  # acknowledged when its op (or the open scheduler step) ends
            if not cache.host.step_depth:
                out.append(Violation("host.transfer", f"node {node.id} is in an immediate {mark[0]} left unacknowledged"))
        elif cd.lock_ref == 0 or (mark[0] == "load" and not any(d.host_lock_ref for d in node.data)):
            out.append(Violation("host.transfer", f"node {node.id} is in a {mark[0]} in flight but not locked for it"))


def _chain_broken(tree, node) -> bool:
    """Write-through's rule (not write-back's): a node with a host copy has a parent
    with one, or the root (sglang#31902)."""
    parent = node.parent
    return (tree.host_policy != "write_back" and node.data[0].host_value is not None and parent is not tree.root
            and parent.data[0].host_value is None)


def _prefetch_rows(cache: UnifiedRadixCache, name: str = FULL) -> int:
    """Host slots of ``name``'s pool the prefetches in flight took and the tree does not
    hold yet (KV for the hit, SWA's and Mamba's staging)."""
    storage = cache.host.storage
    return 0 if storage is None else storage.prefetch.rows_held(name)


def full_host_locks_expected(cache: UnifiedRadixCache, node) -> int:
    """The Full host locks ``node`` should hold: one per store in flight on it, one
    for a held load whose path it is on (or whose anchor, a load with no Full KV),
    one per prefetch in flight anchored at it
    (each marks the node, and the parts split off above it since)."""
    full = node.data[0]
    expected = len(full.metadata.get("store", ())) + len(full.metadata.get("prefetching", ()))
    mark = full.metadata.get("transfer")
    if mark is not None and mark[0] == "load":
        transfer = next((t for t in cache.host.in_flight if t.mark == mark), None)
        expected += transfer is not None and (transfer.full_path or transfer.anchor_held)
    return expected


def _check_stores(cache: UnifiedRadixCache, cols: NodeColumns, out: list[Violation]) -> None:
    storage, tree = cache.host.storage, cache.tree
    if storage is not None:
        if storage.in_flight and not storage.held and not cache.host.step_depth:
            out.append(Violation("storage.store", f"{len(storage.in_flight)} immediate store(s) left unacknowledged"))
        open_acks = {s.ack for s in storage.in_flight}
        for store in storage.in_flight:
            node = store.node
            if tree.nodes.get(node.id) is not node:
                out.append(Violation("storage.store", f"store {store.ack} in flight on node {node.id}, which left the tree"))
            elif node.data[0].host_value is None or store.ack not in node.data[0].metadata.get("store", ()):
                out.append(Violation("storage.store", f"store {store.ack} in flight on node {node.id} without its "
                                     "host copy or its mark"))
            elif node.page_hashes is None or tuple(node.page_hashes) != store.keys[len(store.keys) - len(node.page_hashes):]:
                out.append(Violation("storage.store", f"store {store.ack}'s keys are not node {node.id}'s page hashes"))
        for node in cols.nodes:
            stale = [ack for ack in node.data[0].metadata.get("store", ()) if ack not in open_acks]
            if stale:
                out.append(Violation("storage.store", f"node {node.id} is marked in store {stale[0]}, no longer in flight"))
    for node in cols.nodes:
        held, expected = node.data[0].host_lock_ref, full_host_locks_expected(cache, node)
        if held != expected:
            out.append(Violation("host.lock_balance", f"node {node.id} holds {held} Full host lock(s), its stores and "
                                 f"loads in flight account for {expected}"))


def _check_aux_copies(cache: UnifiedRadixCache, cols: NodeColumns, out: list[Violation]) -> None:
    """Each auxiliary component's host copies: its units each, exactly the pool's used
    slots, what its host part says they hold, and its host LRU exactly the host-only,
    not host-locked ones."""
    tree = cache.tree
    for component in tree.host_components:
        i, name = component.index, component.name
        copies = [node.data[i].host_value for node in cols.nodes if node.data[i].host_value is not None]
        for node in cols.nodes:
            value = node.data[i].host_value
            if value is not None and value.shape[0] != component.value_len(node):
                out.append(Violation("host.value_len", f"node {node.id} {name} host copy has {value.shape[0]} slots"))
        pool = cache.host.aux[name]
        used = pool.size - pool.available_size()
        ps = pool.allocator.page_size
        held = sum(pool.allocator.pages_for(int(c.shape[0])) for c in copies) * ps
        kept = _backups(cache).get(name, [])
        held_by_backups = sum(int(b.shape[0]) for b in kept)
        staged = _prefetch_rows(cache, name)
        if used != held + held_by_backups + staged:
            out.append(Violation("host.pool_balance", f"{name} host pool hands out {used} slots, the nodes hold {held}"
                                 + (f" and retraction backups {held_by_backups}" if kept else "")
                                 + (f" and prefetch staging {staged}" if staged else "")))
        copies = copies + kept
        total = sum(int(c.shape[0]) for c in copies)
        if len(copies) > 1 and torch.unique(torch.cat(copies)).shape[0] != total:
            out.append(Violation("host.shared_slots", f"two {name} host copies share a host slot"))
        out.extend(Violation(*v) for v in component_checks.check_host(component, pool, cols.nodes))  # what they hold
        host_only = {n.id for n in cols.nodes if n.data[i].value is None and n.data[i].host_value is not None}
        unlocked = {n.id for n in cols.nodes if n.id in host_only and n.data[i].host_lock_ref == 0}
        actual = {n.id for n in tree.host_lru[name]}  # a locked host-only node may stay listed (v0.5.23)
        if not unlocked <= actual <= host_only:
            out.append(Violation("host.lru", f"{name} host LRU: extra {sorted(actual - host_only)[:5]}, "
                                 f"missing {sorted(unlocked - actual)[:5]}"))


def _backups(cache: UnifiedRadixCache) -> dict[str, list]:
    """Host slots of the retracted requests' backups (requests/retraction.py), per host
    pool: they are neither free nor any node's."""
    out: dict[str, list] = {}
    for req in cache.retracted.values():
        saved = req.retraction_backup
        if saved is not None:
            for name, slots in saved.host_parts():
                out.setdefault(name, []).append(slots)
    return out


def probe_host_tier(cache: UnifiedRadixCache, nodes: list) -> bool:
    """The per-step probe (incremental.py): the touched nodes' host state
    and each host pool's balance from the tree's counters. False: the sweep names it."""
    tree, host = cache.tree, cache.host
    backups = cache.backup_held() if cache.retracted else {}
    if host.kv.size - host.kv.available_size() != tree.host_held + backups.get(FULL, 0) + _prefetch_rows(cache):
        return False
    for component in tree.host_components:
        pool = host.aux[component.name]
        held = tree.host_units[component.name]
        if pool.size - pool.available_size() != pool.allocator.pages_for(held) * pool.allocator.page_size + \
                backups.get(component.name, 0) + _prefetch_rows(cache, component.name):
            return False
        if not component_checks.probe_host(component, pool, nodes):
            return False
    marks = {t.mark for t in host.in_flight}
    if any(tree.nodes.get(t.node.id) is not t.node for t in host.in_flight):
        return False
    if host.storage is not None and host.storage.prefetch.check():
        return False  # the prefetches in flight (budget, anchors, slots): cheap, a few at most; with
        # none in flight still the budget (a prefetch dropped unfinished leaves its tokens there)
    for node in nodes:
        full = node.data[0]
        if full.host_value is not None and full.host_value.shape[0] != node.length:
            return False
        parent = node.parent
        if full.value is not None and parent is not tree.root and parent.data[0].value is None:
            return False  # device data below host-only data
        if full.value is None and full.lock_ref > 0:
            return False
        if _chain_broken(tree, node) or any(_chain_broken(tree, child) for child in node.children.values()):
            return False
        if (node in tree.host_leaves) != tree.is_host_leaf(node) or (
                parent is not tree.root and (parent in tree.host_leaves) != tree.is_host_leaf(parent)):
            return False
        if full.host_lock_ref != full_host_locks_expected(cache, node) or (
                "store" in full.metadata and full.host_value is None):
            return False
        mark = full.metadata.get("transfer")
        if mark is not None and (mark not in marks or (host.held and full.lock_ref == 0) or (
                mark[0] == "load" and not any(d.host_lock_ref for d in node.data))):
            return False
        for component in tree.host_components:
            cd = node.data[component.index]
            if cd.host_value is not None and cd.host_value.shape[0] != component.value_len(node):
                return False
            listed = node in tree.host_lru[component.name]
            host_only = cd.value is None and cd.host_value is not None
            if (listed and not host_only) or (host_only and cd.host_lock_ref == 0 and not listed):
                return False
    return True
