"""The invariant checker: named violations, never an exception.

``check_invariants(cache)`` (the full sweep) recomputes every counter and index from
the nodes and compares. It visits each node a constant number of times in Python and
hands everything per slot (pool pages, SWA translations, state fingerprints) to torch
in a few batched calls: per-node tensor calls are what made it slow.

``check_invariants(cache, touched=ids)`` is the per-step mode: cheap probes around the
nodes a step touched plus O(1) balances (``invariants_incremental``). When every probe
passes it returns []; when any fails it runs the full sweep and returns exactly what
the sweep returns, so both modes always name a problem the same way.

``verify_match`` proves a match handed out the right KV slots via their fingerprints.
"""

from __future__ import annotations

import contextlib
import functools
import operator
from collections.abc import Iterable
from typing import TYPE_CHECKING, Optional

import torch

from ..basics.keys import RadixKey, child_key, token_array
from ..tree.locks import fresh_groups, one_fresh_grouping
from ..basics.violation import Violation

if TYPE_CHECKING:
    from ..controller.unified_radix_cache import UnifiedRadixCache
    from ..basics.params import MatchResult


def check_invariants(cache: UnifiedRadixCache, touched: Optional[Iterable[int]] = None,
                     data_touched: Optional[Iterable[int]] = None) -> list[Violation]:
    """Every invariant over the whole tree; or, with ``touched`` (node ids a step
    changed, e.g. from ``cache.tree.take_touched()`` or the step's event node ids; ids
    no longer in the tree are skipped), the incremental probes first and the full sweep
    only when one of them fails (or when half the tree was touched: the sweep is then
    cheaper). ``data_touched``: those of them whose data (slots, KV, states, children)
    the step may have changed, the rest only their locks or LRU places (default: all);
    only they get the content probes. Either way the answer is [] or exactly the
    sweep's. See ``invariants_incremental`` for what the probes cover and what only
    the sweep sees."""
    audit = cache.tree.eviction_audit  # the victims Full took out of its policy's order (tree_core.py)
    if audit:
        found = [Violation(name, msg) for name, msg in audit]
        audit.clear()
        return found + check_invariants(cache, touched, data_touched)
    with one_thread():
        if touched is not None:
            touched = set(touched)
        if touched is not None and _probe_is_cheaper(cache.tree, touched, data_touched):
            try:
                if probe(cache, touched, data_touched):
                    return []
            except Exception:  # a probe that trips over corrupt state found something: the sweep names it
                pass
        return _sweep(cache)


SMALL_TREE = 64  # nodes: below this the sweep's fixed cost (a few dozen tensor calls) exceeds any probe


def _probe_is_cheaper(tree, touched: set, data_touched) -> bool:
    """Probe rather than sweep: a content probe costs about the sweep's per node, and the
    sweep also walks every held receipt (the probe: each group once), so sweep when half
    of that has its content touched, unless the tree is small (measured, fuzzer-sized
    trees: a sweep 1.3 ms, a probe of every node 0.25 ms; 212 nodes: both about 6 ms)."""
    content = len(touched) if data_touched is None else len(set(data_touched) & touched)
    return len(tree.nodes) < SMALL_TREE or 2 * content < len(tree.nodes) + len(tree.live_receipts)


@contextlib.contextmanager
def one_thread():
    """Run the checker's tensor ops on one intra-op thread: they are small (an entry per
    node or slot), so more threads only add a hand-off per op, and on a busy 2-core
    machine each hand-off can stall for milliseconds (measured: 0.1 ms -> 6 ms). Free
    when already on one thread: a loop of checked steps holds it once around the loop
    (switching back and forth per step cost 0.12 ms a step: the pool restarts)."""
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _sweep(cache: UnifiedRadixCache) -> list[Violation]:
    from .pools import check_full_pool

    out: list[Violation] = []
    try:
        with one_fresh_grouping(cache.tree):  # the receipts filed afresh once, for every lock check
            cols = _check_structure(cache, out)
            _check_counters(cache, cols, out)
            _check_leaf_set(cache, cols, out)
            _check_lru_lists(cache, cols, out)
            check_full_pool(cache, cols, out)
            _check_receipts(cache, out)
            _check_lock_counts(cache, cols, out)
            if cache.session_slots or cache.session_controller.sessions:
                from ..sessions.streaming import check_streaming

                out.extend(Violation(name, msg) for name, msg in check_streaming(cache))
            if cache.host is not None:
                from .host import check_host_tier

                check_host_tier(cache, cols, out)
            if cache.tree.tlru_bookkeeping:
                from ..tree.leaf_policies import check_tlru_lens

                out.extend(Violation(name, msg) for name, msg in check_tlru_lens(cache.tree))
            if cache.tree.page_hashing:
                from ..basics.page_hash import chain_violations

                out.extend(Violation(name, msg) for name, msg in chain_violations(cache.tree, cache.tree.nodes.values()))
            if cache.tree.session_radix_cache:
                from .sessions import check_sessions

                check_sessions(cache, out)
            # the components read every registered node: share the columns when that is the same set
            shared = cols if cols.registered else None
            for component in cache.components:
                out.extend(Violation(name, msg) for name, msg in component.check_invariants(shared))
    except Exception as exc:  # a corrupt tree must still yield a report
        out.append(Violation("checker.crashed", f"{type(exc).__name__}: {exc}"))
    return out


class NodeColumns:
    """Nodes as columns, one plain list per field (and the Full slots as one tensor),
    built once per sweep and shared with the components' checks: each check is then a
    comprehension over lists or one tensor op, where reading node and tensor attributes
    again in every check (and a torch call per node) dominated the old sweep."""

    def __init__(
        self, nodes: list, num_components: int, device, full_parents: Optional[set] = None, registered: bool = False
    ) -> None:
        self.nodes = nodes
        self.device = device
        self.ids = [n.id for n in nodes]
        self.lengths = [n.length for n in nodes]
        self.in_leaf_set = [n.in_leaf_set for n in nodes]
        datas = [n.data for n in nodes]
        self.data = [[d[i] for d in datas] for i in range(num_components)]  # ComponentData per node
        self.values = [[cd.value for cd in col] for col in self.data]
        self.locks = [[cd.lock_ref for cd in col] for col in self.data]
        self.full_parents = full_parents  # ids of nodes with a child that has Full KV
        self.registered = registered  # exactly the tree's registered non-root nodes

    @classmethod
    def of_tree(cls, tree) -> NodeColumns:
        """Every registered non-root node, in registry order."""
        nodes = [n for n in tree.nodes.values() if n is not tree.root]
        return cls(nodes, len(tree.components), tree.device, registered=True)

    @functools.cached_property
    def full_lengths(self) -> list[int]:
        """Each node's Full value length (0 without one)."""
        return [0 if v is None else v.shape[0] for v in self.values[0]]

    @functools.cached_property
    def full_slots(self) -> torch.Tensor:
        """Every node's Full slots, node after node (one cat)."""
        values = [v for v, n in zip(self.values[0], self.full_lengths) if n]
        if not values:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        return values[0] if len(values) == 1 else torch.cat(values)

    @functools.cached_property
    def full_owner(self) -> torch.Tensor:
        """For each entry of ``full_slots``, the position of its node in ``nodes``."""
        lengths = torch.tensor(self.full_lengths, dtype=torch.int64, device=self.device)
        return torch.repeat_interleave(torch.arange(len(self.nodes), device=self.device), lengths)


def _check_structure(cache, out: list[Violation]) -> NodeColumns:
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


def _check_counters(cache, cols: NodeColumns, out: list[Violation]) -> None:
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


def _check_leaf_set(cache, cols: NodeColumns, out: list[Violation]) -> None:
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


def _check_lru_lists(cache, cols: NodeColumns, out: list[Violation]) -> None:
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
            if cur.id >= 0:  # not a session partition's sentinel (lru_session.py)
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


def _check_receipts(cache, out: list[Violation]) -> None:
    for receipt_id, receipt in cache.tree.live_receipts.items():
        node_id = receipt.node_id
        if node_id not in cache.tree.nodes:
            out.append(Violation("lock.receipt_dangling", f"receipt {receipt_id} anchored on deleted node {node_id}"))


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


def _check_lock_counts(cache, cols: NodeColumns, out: list[Violation]) -> None:
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


def verify_match(cache: UnifiedRadixCache, key: RadixKey | list[int], result: MatchResult) -> list[Violation]:
    """The slots a match returned must hold the fingerprints of the key's prefix."""
    tokens = token_array(key.data) if isinstance(key, RadixKey) else list(key)
    indices = result.device_indices
    n = int(indices.shape[0])
    if n > len(tokens):
        return [Violation("match.too_long", f"match returned {n} slots for a {len(tokens)}-token key")]
    if n % cache.page_size:
        return [Violation("match.page_aligned", f"match length {n} is not a multiple of page {cache.page_size}")]
    bad = cache.kv_buffer.mismatches(indices, tokens[:n])
    if bad:
        return [Violation("match.fingerprint", f"{len(bad)} slot(s) hold the wrong KV, first at position {bad[0]}")]
    return [v for c in cache.components for v in c.verify_match(tokens, result)]


from .incremental import probe  # noqa: E402  (it reads this module's expected_locks: imported last)
