"""The invariant checker: named violations, never an exception.

``check_invariants`` recomputes every counter and index from the nodes and compares;
``verify_match`` proves a match handed out the right KV slots via their fingerprints.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .keys import RadixKey

if TYPE_CHECKING:
    from .controller import UnifiedRadixCache
    from .params import MatchResult


@dataclasses.dataclass(frozen=True)
class Violation:
    name: str  # stable identifier, e.g. "counter.evictable"
    message: str

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


def check_invariants(cache: UnifiedRadixCache) -> list[Violation]:
    out: list[Violation] = []
    try:
        _check_structure(cache, out)
        _check_counters(cache, out)
        _check_leaf_set(cache, out)
        _check_lru_lists(cache, out)
        _check_full_pool(cache, out)
        _check_receipts(cache, out)
        _check_lock_counts(cache, out)
        for component in cache.components:
            out.extend(Violation(name, msg) for name, msg in component.check_invariants())
    except Exception as exc:  # a corrupt tree must still yield a report
        out.append(Violation("checker.crashed", f"{type(exc).__name__}: {exc}"))
    return out


def _non_root(cache):
    root = cache.tree.root
    return [n for n in cache.tree.iter_nodes() if n is not root]


def _check_structure(cache, out: list[Violation]) -> None:
    tree = cache.tree
    root = tree.root
    ps = cache.page_size
    full = root.data[0]
    if full.value is None or full.value.shape[0] != 0 or root.key:
        out.append(Violation("root.shape", "root must have an empty key and an empty Full value"))
    for component in cache.components:
        if root.data[component.index].lock_ref < 1:
            out.append(Violation("root.lock", f"root {component.name} lock_ref must stay >= 1"))
    seen = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node.id in seen:
            out.append(Violation("tree.cycle", f"node {node.id} reached twice"))
            continue
        seen.add(node.id)
        for ck, child in node.children.items():
            if child.parent is not node:
                out.append(Violation("tree.parent", f"node {child.id}'s parent is not {node.id}"))
            if ck != tree._child_key_of(child) or child.child_key != ck:
                out.append(Violation("tree.child_key", f"node {child.id} filed under the wrong child key"))
            stack.append(child)
    if seen != set(tree.nodes):
        out.append(Violation("tree.arena", f"registered vs reachable differ: {sorted(set(tree.nodes) ^ seen)[:5]}"))
    for node in _non_root(cache):
        if node.length == 0 or node.length % ps:
            out.append(Violation("key.page_aligned", f"node {node.id} key length {node.length} (page {ps})"))
        fcd = node.data[0]
        if fcd.value is None:
            out.append(Violation("full.present", f"node {node.id} has no Full KV (no host tier here)"))
        elif fcd.value.shape[0] != node.length:
            out.append(Violation("full.value_len", f"node {node.id} Full value {fcd.value.shape[0]} != key {node.length}"))
        for component in cache.components:
            cd = node.data[component.index]
            if cd.lock_ref < 0:
                out.append(Violation("lock.negative", f"node {node.id} {component.name} lock_ref {cd.lock_ref}"))
            if component.index and cd.lock_ref > fcd.lock_ref:
                out.append(Violation("lock.full_dominates", f"node {node.id} {component.name} lock {cd.lock_ref} > full {fcd.lock_ref}"))
            if component.index and cd.value is not None and fcd.value is None:
                out.append(Violation("aux.implies_full", f"node {node.id} has {component.name} data without Full KV"))


def _check_counters(cache, out: list[Violation]) -> None:
    tree = cache.tree
    for component in cache.components:
        evictable = protected = 0
        for node in _non_root(cache):
            cd = node.data[component.index]
            if cd.value is None:
                continue
            n = component.value_len(node)
            if cd.lock_ref > 0:
                protected += n
            else:
                evictable += n
        i = component.index
        if tree.evictable[i] != evictable:
            out.append(Violation("counter.evictable", f"{component.name} evictable {tree.evictable[i]} != recomputed {evictable}"))
        if tree.protected[i] != protected:
            out.append(Violation("counter.protected", f"{component.name} protected {tree.protected[i]} != recomputed {protected}"))


def _check_leaf_set(cache, out: list[Violation]) -> None:
    tree = cache.tree
    expected = {n.id for n in _non_root(cache) if tree.is_device_leaf(n)}
    actual = {n.id for n in tree.leaves}
    flagged = {n.id for n in tree.nodes.values() if n.in_leaf_set}
    if expected != actual:
        out.append(Violation("leaf_set", f"extra {sorted(actual - expected)[:5]}, missing {sorted(expected - actual)[:5]}"))
    if flagged != actual:
        out.append(Violation("leaf_set.flag", f"in_leaf_set flags disagree with the set: {sorted(flagged ^ actual)[:5]}"))


def _check_lru_lists(cache, out: list[Violation]) -> None:
    tree = cache.tree
    for component in cache.components:
        if not component.uses_lru:
            continue
        lru = tree.lru[component.name]
        members, prev, s = [], lru.head, lru.slot
        cur = lru.head.lru_next[s]
        while cur is not lru.tail and cur is not None and len(members) <= len(tree.nodes) + 1:
            if cur.lru_prev[s] is not prev:
                out.append(Violation("lru.links", f"{component.name} LRU: broken prev link at node {cur.id}"))
                return
            members.append(cur)
            prev, cur = cur, cur.lru_next[s]
        if cur is not lru.tail:
            out.append(Violation("lru.links", f"{component.name} LRU: chain does not reach the tail"))
            return
        ids = [n.id for n in members]
        if len(ids) != lru.size or len(set(ids)) != len(ids):
            out.append(Violation("lru.size", f"{component.name} LRU size {lru.size}, walked {len(ids)}"))
        want = {n.id for n in _non_root(cache) if n.data[component.index].value is not None}
        if set(ids) != want:
            out.append(
                Violation(
                    "lru.vs_tree",
                    f"{component.name} LRU: only in list {sorted(set(ids) - want)[:5]}, only in tree {sorted(want - set(ids))[:5]}",
                )
            )


def _check_full_pool(cache, out: list[Violation]) -> None:
    pool = cache.kv_pool
    tree_pages: list[int] = []
    for node in _non_root(cache):
        value = node.data[0].value
        if value is not None and value.shape[0]:
            tree_pages.extend(pool.page_ids(value).tolist())
    held_pages: list[int] = []
    for req in cache.requests.values():
        held_pages.extend(pool.page_ids(req.own_indices).tolist())
    out.extend(Violation(name, msg) for name, msg in pool_balance(pool, tree_pages, held_pages))


def pool_balance(pool, tree_pages: list[int], held_pages: list[int]) -> list[tuple[str, str]]:
    """available + cached + held == total, no page both free and used or owned twice,
    and the allocator's ownership marks agree with its free list."""
    out: list[tuple[str, str]] = []
    name, ps = pool.name, pool.page_size
    free = pool.free_pages_list()
    free_set = set(free)
    if len(free_set) != len(free):
        out.append((f"pool.{name}.free_twice", "a page sits on the free list twice"))
    used = tree_pages + held_pages
    if len(set(used)) != len(used):
        out.append((f"pool.{name}.owned_twice", f"page(s) owned twice: {_dupes(used)[:5]}"))
    both = free_set & set(used)
    if both:
        out.append((f"pool.{name}.free_and_used", f"page(s) both free and in use: {sorted(both)[:5]}"))
    cached = len(set(tree_pages)) * ps
    held = len(set(held_pages)) * ps
    available = pool.available_size()
    if available + cached + held != pool.size:
        out.append(
            (
                f"pool.{name}.balance",
                f"available {available} + cached {cached} + held {held} != total {pool.size} "
                f"(leak of {pool.size - available - cached - held})",
            )
        )
    owned = pool.owned_mask().tolist()
    bad = [p for p in range(pool.num_pages) if (owned[p] == 0) != (p in free_set)]
    if bad:
        out.append((f"pool.{name}.ownership", f"ownership marks disagree with the free list on page(s) {bad[:5]}"))
    return out


def _check_receipts(cache, out: list[Violation]) -> None:
    for receipt_id, receipt in cache.tree.live_receipts.items():
        node_id = receipt.node_id
        if node_id not in cache.tree.nodes:
            out.append(Violation("lock.receipt_dangling", f"receipt {receipt_id} anchored on deleted node {node_id}"))


def _check_lock_counts(cache, out: list[Violation]) -> None:
    """Every lock_ref equals what the held receipts account for (the root: 1)."""
    tree = cache.tree
    expected: dict[tuple[int, int], int] = {}
    for receipt in tree.live_receipts.values():
        anchor = tree.nodes.get(receipt.node_id)
        if anchor is None:
            continue
        for component in cache.components:
            if not tree._releases(component, receipt, receipt.swa_released):
                continue
            try:
                nodes = component.locked_nodes(anchor, receipt)
            except LookupError as exc:
                out.append(Violation("lock.receipt_segment", f"receipt {receipt.receipt_id}: {exc}"))
                continue
            for node in nodes:
                key = (node.id, component.index)
                expected[key] = expected.get(key, 0) + 1
    for node in tree.nodes.values():
        for component in cache.components:
            want = 1 if node is tree.root else expected.get((node.id, component.index), 0)
            have = node.data[component.index].lock_ref
            if have != want:
                out.append(
                    Violation("lock.unaccounted", f"node {node.id} {component.name} lock_ref {have}, held receipts account for {want}")
                )


def _dupes(items: list[int]) -> list[int]:
    seen, dup = set(), []
    for x in items:
        if x in seen:
            dup.append(x)
        seen.add(x)
    return dup


def verify_match(cache: UnifiedRadixCache, key: RadixKey | list[int], result: MatchResult) -> list[Violation]:
    """The slots a match returned must hold the fingerprints of the key's prefix."""
    tokens = key.token_ids if isinstance(key, RadixKey) else list(key)
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
