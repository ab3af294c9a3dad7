"""The per-step check: probes around the nodes a step touched, plus O(1) balances.

``check_invariants(cache, touched=ids)`` calls ``probe``. When every probe passes it
reports nothing; when one fails (or trips over corrupt state) the full sweep runs and
its report is returned, so the per-step mode never names a problem differently from
the sweep. While the cache is healthy it costs O(touched nodes x depth + running
requests + the distinct nodes the held receipts lock + their groups x depth), a few
tensor ops in all. Receipts come filed in groups by the tree core (``lock_groups``:
one anchor, one signature, so the same locked nodes): the lock checks walk each group
once, so a thousand locks on one match cost what one does. Locks on many distinct
anchors still cost a walk each (their nodes differ); the sweep files the receipts
afresh, O(held receipts), which is why ``check_invariants`` counts them in deciding
between probe and sweep.

Probed for the touched nodes still in the tree (other ids are skipped; with
``data_touched``, only those of them whose data the step may have changed):
  - shape: key page-aligned and non-empty, Full KV present with the key's length
    (key.page_aligned, full.present, full.value_len, aux.implies_full)
  - children: each points back, is registered, filed by its own key (tree.*)
  - Full slots, all nodes at once: on pages the pool handed out, whole pages in slot
    order, holding this path's KV fingerprints when fingerprints are written
    (pool.full.free_and_used, pool.full.owned_twice: another node's slots)
  - per component (its checks' ``probe``): SWA tombstones map no slot, SWA data is the
    translation of the Full slots on owned pages, a boundary uuid differs from the
    parent's and children's (swa.*); a Mamba state is one owned slot whose
    fingerprint is this path's and whose tensors agree (mamba.*)
and for each touched node and every ancestor up to the root:
  - filed under its parent by the right key, the chain reaching the root (tree.*)
  - each lock_ref equal to what the held receipts account for, Full's >= the
    others' (lock.unaccounted, lock.negative, lock.full_dominates)
  - leaf-set membership, flag and evictable-leaf status agree (leaf_set, leaf_set.flag)
  - LRU membership iff the component has data there, neighbours linking back
    (lru.vs_tree, lru.links)
Global, on every call:
  - root shape and locks (root.shape, root.lock)
  - per pool: available + evictable + protected + held by running requests == total
    (counter.evictable, counter.protected: a drifted counter; pool.*.balance: a leak)
  - per component: protected == the units the held receipts lock (counter.*: a move
    between evictable and protected), the nodes they lock hold exactly those locks,
    receipts on live nodes with findable segments (lock.unaccounted,
    lock.receipt_dangling, lock.receipt_segment), SWA window locks (swa.window_lock),
    lock order on anchors (lock.order), Mamba LRU size == its state count (lru.size);
    each per receipt group, not per receipt
While the tree hashes pages: each data-touched node's hash chain (page_hash.chain).
With a host tier (host.py's probe): each touched node's host copies whole,
device data never below host-only data, no device lock on host-only data, host-leaf
and host-LRU membership, the marks of transfers in flight; each host pool's balance
from the tree's counters.
Left to the full sweep (inherently O(tree), or away from every touched node):
  - registered nodes no touched chain leads to (tree.arena), a stale child entry
    under an untouched parent, damage on untouched nodes (e.g. descendants of a node
    whose parent link moved, an LRU neighbour left with a stale link)
  - allocator internals (pool.*.free_twice, pool.*.ownership), pages owned twice by
    two untouched nodes, a leak exactly offset by a counter drift
  - the SWA LRU list's size and order (lru.size, lru.links), a boundary uuid repeated
    away from a node's parent and children (swa.uuid_unique)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

import numpy as np

from ..basics.keys import child_key
from ..basics.numpy_views import host_cat
from ..basics.page_hash import chain_violations
from ..pools.kv_buffer import continue_hashes, path_fingerprints
from ..sessions.streaming import check_streaming
from ..tree.node import path_starts
from . import component_checks
from .host import probe_host_tier
from .locks import expected_locks
from .sessions import sessions_ok


def probe(cache, touched: Iterable[int], data_touched: Optional[Iterable[int]] = None) -> bool:
    """True when nothing around ``touched`` nor any O(1) balance looks wrong. The
    content probes (shape and children, KV fingerprints, SWA translation, Mamba
    states) look only at ``data_touched`` (default: all of ``touched``): a step that
    only took or dropped locks or moved LRU places changed no content to re-read."""
    tree = cache.tree
    nodes = [n for n in (tree.nodes.get(i) for i in set(touched)) if n is not None and n is not tree.root]
    data_ids = None if data_touched is None else set(data_touched)
    data_nodes = nodes if data_ids is None else [n for n in nodes if n.id in data_ids]
    groups = tree.held_lock_groups()
    expected = expected_locks(cache, groups=groups)  # a missing segment raises: the sweep names it
    return (
        _root_ok(tree)
        and _receipts_ok(cache, expected, groups)
        and _full_pool_ok(cache)
        and _path_ok(cache, nodes, expected)
        and _nodes_ok(cache, data_nodes)
        and all(component_checks.probe(component, data_nodes) for component in cache.components)
        and (cache.host is None or probe_host_tier(cache, nodes))
        and (not tree.session_radix_cache or sessions_ok(cache))
        and not (tree.page_hashing and chain_violations(tree, data_nodes))
        and not (cache.session_slots and check_streaming(cache))
    )


def _root_ok(tree) -> bool:
    root = tree.root
    value = root.data[0].value
    return value is not None and value.shape[0] == 0 and not root.key and all(cd.lock_ref == 1 for cd in root.data)


def _receipts_ok(cache, expected: list[dict[int, int]], groups: dict) -> bool:
    """Receipts sit on live nodes (one look per group: a group shares its anchor);
    every node they lock holds exactly that many locks; each protected counter is the
    units those locks cover."""
    tree = cache.tree
    nodes = tree.nodes
    if any(key[0] not in nodes for key in groups):  # lock_group_key starts with the anchor
        return False
    for component in cache.components:
        i, counts = component.index, expected[component.index]
        locked = [nodes[node_id] for node_id in counts]
        if any(node.data[i].lock_ref != counts[node.id] for node in locked):
            return False
        units = sum(component.value_len(node) for node in locked if node.data[i].value is not None)
        if units != tree.protected[i]:
            return False
    return True


def _full_pool_ok(cache) -> bool:
    """available + evictable + protected + held by running requests == total."""
    pool, tree = cache.kv_pool, cache.tree
    held = sum(pool.pages_for(max(0, r.kv_len - r.cache_protected_len)) for r in cache.kv_holders()) * pool.page_size
    return pool.available_size() + tree.evictable[0] + tree.protected[0] + held == pool.size


def _path_ok(cache, nodes: list, expected: list[dict[int, int]]) -> bool:
    """Each touched node and its ancestors: filed under the parent by the right key,
    the chain reaches the root, locks are what the receipts account for, and the leaf
    state and LRU membership (with the neighbours' links back) are consistent."""
    tree = cache.tree
    pb, registry = tree.page_bytes, tree.nodes
    lru_slots = [c.index for c in cache.components if c.uses_lru]
    reached = {tree.root.id}  # nodes whose chain is known to reach the root
    for node in nodes:
        chain = set()
        while node.id not in reached:
            if node.id in chain:
                return False  # the parent links loop
            chain.add(node.id)
            parent = node.parent
            if parent is None or parent.children.get(node.child_key) is not node or registry.get(node.id) is not node:
                return False
            if node.child_key != child_key(node.key, 0, pb, node.namespace):
                return False
            data = node.data
            full_lock = data[0].lock_ref
            for i, cd in enumerate(data):
                if cd.lock_ref != expected[i].get(node.id, 0) or cd.lock_ref > full_lock:
                    return False
            if not node.in_leaf_set == tree.leaves.holds(node) == tree.is_device_leaf(node):
                return False
            for i in lru_slots:
                prev, nxt = node.lru_prev[i], node.lru_next[i]
                if (prev is not None) != (data[i].value is not None):
                    return False
                if prev is not None and (prev.lru_next[i] is not node or nxt is None or nxt.lru_prev[i] is not node):
                    return False
            node = parent
        reached |= chain
    return True


def _nodes_ok(cache, nodes: list) -> bool:
    """Each touched node's own shape and its children's links back to it; then all their
    Full slots at once: on pages the pool has handed out, whole pages in slot order (as
    allocated) and, when fingerprints are written, holding the KV of their own paths. A
    node holding another node's slots fails the last two (a page shared within a page
    boundary shows in the order, a whole page in the fingerprints)."""
    tree, ps = cache.tree, cache.page_size
    pb, registry = tree.page_bytes, tree.nodes
    for node in nodes:
        length, full = node.length, node.data[0].value
        host_only = full is None and node.data[0].host_value is not None  # its checks: host.py
        if length == 0 or length % ps or (full is None and not host_only) or (full is not None and full.shape[0] != length):
            return False
        for ck, child in node.children.items():
            if child.parent is not node or registry.get(child.id) is not child or child.child_key != ck:
                return False
            if ck != child_key(child.key, 0, pb, child.namespace):
                return False
    nodes = [node for node in nodes if node.data[0].value is not None]
    if not nodes:
        return True
    slots = host_cat([node.data[0].value for node in nodes])  # a few slots: read on the host
    if ps > 1:
        pages = slots.reshape(-1, ps)
        if not (pages - pages[:, :1] == np.arange(ps)).all() or (pages[:, 0] % ps).any():
            return False
    if not cache.kv_pool.all_owned(slots):
        return False
    if not getattr(cache, "fingerprints", True):
        return True
    starts = path_fingerprints([node.parent for node in nodes], cache.kv_buffer)  # read: as strict,
    # a wrong stored value makes the child's own fingerprints (the whole path's KV) mismatch
    above = path_starts(tree, nodes)  # where each key sits in its path: the step's request may hold it
    return cache.kv_buffer.holds(slots, continue_hashes([node.key for node in nodes], starts,
                                                        [above[node.id] for node in nodes]))
