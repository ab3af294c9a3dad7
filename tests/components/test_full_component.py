"""Upstream's Full-only cases (spec §8.1), at page sizes 1, 4 and 16.

Every step goes through the ``Checked`` helper (invariants after each call,
fingerprints after each match). Expected numbers are derived from the spec's
scenarios and page arithmetic: ``P`` is one page (``ps`` tokens), the pool starts
with ``total`` free slots and every insert allocates whole pages.
"""

from __future__ import annotations

import pytest
import torch

from cache import EvictParams, InsertParams, RadixKey

from conftest import assert_empty_tree, lock_ref, matched, seq, stray


# ---- core insert / match ------------------------------------------------------------


def test_insert_and_match_basic(full):
    P, total = full.ps, full.cache.total_size()
    a = seq(1, 2, P)
    b = a + seq(1000, 1, P)
    assert full.insert(a).prefix_len == 0
    assert full.insert(b).prefix_len == 2 * P
    # B's first two pages were duplicates and went back to the pool
    assert full.cache.available_size() == total - 3 * P
    assert matched(full, b) == 3 * P
    assert matched(full, a + seq(9000, 1, P)) == 2 * P
    assert matched(full, a) == 2 * P
    assert matched(full, seq(5000, 2, P)) == 0
    assert matched(full, []) == 0


def test_match_result_nodes_coincide_without_host_tier(full):
    P = full.ps
    a = seq(1, 3, P)
    leaf = full.insert(a).last_device_node
    r = full.match(a)
    assert r.last_device_node == r.last_host_node == r.best_match_node == leaf
    assert r.host_hit_length == 0
    assert r.prefix_len == 3 * P
    miss = full.match(seq(7000, 1, P))
    assert miss.last_device_node == full.cache.tree.root.id


def _fork_twice(full, base_pages: int, fork_pages: int) -> int:
    """A base key, then two forks off its end (tokens 100… and 200…): each fork's insert
    shares the whole base, each fork then matches whole and a third only the base.
    Returns the base's node (what the split tests look at next)."""
    P = full.ps
    base = seq(1, base_pages, P)
    base_id = full.insert(base).last_device_node
    forks = [base + seq(start, fork_pages, P) for start in (100, 200)]
    for fork in forks:
        assert full.insert(fork).prefix_len == base_pages * P
    for fork in forks:
        assert matched(full, fork) == (base_pages + fork_pages) * P
    assert matched(full, base + seq(9000, 1, P)) == base_pages * P
    return base_id


def test_shared_prefix_split(full):
    P = full.ps
    _fork_twice(full, base_pages=2, fork_pages=2)
    snap = full.cache.snapshot()
    (top,) = snap.root.children
    assert snap.node(top).tokens == 2 * P
    kids = snap.node(top).children
    assert sorted(snap.node(k).key for k in kids) == [tuple(seq(100, 2, P)), tuple(seq(200, 2, P))]


def test_split_inside_a_node(full):
    """A fork in the middle of an existing node splits it at the page boundary."""
    P = full.ps
    long = seq(1, 3, P)
    leaf = full.insert(long).last_device_node
    fork = seq(1, 1, P) + seq(300, 2, P)
    assert full.insert(fork).prefix_len == P
    snap = full.cache.snapshot()
    (upper,) = snap.root.children
    assert snap.node(upper).key == tuple(seq(1, 1, P))
    assert len(snap.node(upper).children) == 2
    # the old leaf keeps its id and now holds only the suffix
    assert snap.node(leaf).parent == upper
    assert snap.node(leaf).key == tuple(long[P:])
    assert matched(full, long) == 3 * P
    assert matched(full, fork) == 3 * P


def test_node_split_at_boundary(full):
    P = full.ps
    base_id = _fork_twice(full, base_pages=3, fork_pages=1)
    # the forks sit exactly at the end of the base node: no split was needed
    snap = full.cache.snapshot()
    assert snap.root.children == (base_id,)
    assert snap.node(base_id).tokens == 3 * P
    assert len(snap.node(base_id).children) == 2
    assert len(snap.nodes) == 4


def test_multi_branch_tree(full):
    P = full.ps
    base = seq(1, 2, P)
    base_id = full.insert(base).last_device_node
    branches = [base + seq(s, 2, P) for s in (100, 200, 300)]
    for br in branches:
        assert full.insert(br).prefix_len == 2 * P
    for br in branches:
        assert matched(full, br) == 4 * P
    assert matched(full, base + seq(9000, 1, P)) == 2 * P
    snap = full.cache.snapshot()
    assert len(snap.node(base_id).children) == 3
    assert full.cache.full_evictable_size() == 8 * P
    assert full.cache.available_size() == full.cache.total_size() - 8 * P


def test_prev_prefix_len_duplicate_freeing(full):
    cache, P = full.cache, full.ps
    init = cache.available_size()
    full.insert(seq(1, 1, P))
    assert cache.available_size() == init - P
    # 2 fresh pages, prev_prefix_len 0: the first page duplicates the tree -> freed
    assert full.insert(seq(1, 2, P)).prefix_len == P
    assert cache.available_size() == init - 2 * P
    # 3 fresh pages, prev_prefix_len 2 pages: the caller claims the first 2 pages as its
    # own use of the tree, so nothing is freed and the pool drops by all 3 fresh pages
    tokens = seq(1, 3, P)
    fresh = cache.alloc_kv(3 * P)
    cache.write_kv(fresh, tokens)
    result = cache.insert(InsertParams(RadixKey(tokens), fresh, prev_prefix_len=2 * P))
    assert result.prefix_len == 2 * P
    assert cache.available_size() == init - 2 * P - 3 * P
    # those 2 pages are the caller's; once it returns them every pool balances again
    cache.free_kv([fresh[: 2 * P]])
    full.ok()
    assert cache.available_size() == init - 3 * P
    assert matched(full, tokens) == 3 * P


def test_prev_prefix_len_with_tree_slots(full):
    """The realistic shape: the value starts with the tree's own slots."""
    cache, P = full.cache, full.ps
    full.insert(seq(1, 2, P))
    before = cache.available_size()
    tokens = seq(1, 3, P)
    m = full.match(tokens)
    fresh = cache.alloc_kv(P)
    cache.write_kv(fresh, tokens, 2 * P)
    value = torch.cat([m.device_indices, fresh])
    assert full.insert(tokens, prev_prefix_len=2 * P, value=value).prefix_len == 2 * P
    assert cache.available_size() == before - P
    assert matched(full, tokens) == 3 * P


# ---- partial pages and page-boundary mismatches -------------------------------------


def test_partial_trailing_pages(full):
    P = full.ps
    if P == 1:
        pytest.skip("a page of one token has no partial page")
    cache, total = full.cache, full.cache.total_size()
    two = seq(1, 2, P)
    full.insert(two)
    assert matched(full, two + stray(P - 1)) == 2 * P
    assert matched(full, two[: P - 1]) == 0
    assert matched(full, two[: 2 * P - 1]) == P
    # inserting an unaligned key caches only its whole pages
    other = seq(500, 1, P) + stray(P - 1, 600)
    leaf = full.insert(other).last_device_node
    assert cache.snapshot().node(leaf).key == tuple(seq(500, 1, P))
    assert cache.available_size() == total - 3 * P
    # a key shorter than a page is not inserted at all
    nodes = len(cache.snapshot().nodes)
    assert full.insert(stray(P - 1, 700)).prefix_len == 0
    assert len(cache.snapshot().nodes) == nodes
    assert cache.available_size() == total - 3 * P


def test_page_boundary_mismatch(full):
    P = full.ps
    page1 = seq(1, 1, P)
    two = seq(1, 2, P)
    full.insert(page1)
    full.insert(two)
    assert matched(full, page1 + [9999] * P) == P
    # only the first token of the first page is wrong: nothing matches
    assert matched(full, [9999] + two[1:]) == 0
    # only the first token of the second page is wrong: the second page is lost
    assert matched(full, two[:P] + [9999] + two[P + 1 :]) == P
    # only the last token of the second page is wrong: same (for ps 1 it is the first)
    assert matched(full, two[:-1] + [9999]) == P
    assert matched(full, two) == 2 * P


def test_mismatch_inside_page_of_long_node_splits_on_page(full):
    P = full.ps
    long = seq(1, 3, P)
    leaf = full.insert(long).last_device_node
    query = list(long)
    query[P + P // 2] = 9999  # inside page 2
    assert matched(full, query) == P
    snap = full.cache.snapshot()
    (upper,) = snap.root.children
    assert snap.node(upper).tokens == P
    assert snap.node(leaf).parent == upper and snap.node(leaf).tokens == 2 * P
    assert matched(full, long) == 3 * P


# ---- eviction ----------------------------------------------------------------------


def test_evict_empty_tree(full):
    result = full.evict(10)
    assert result.num_tokens_evicted == 0
    assert result.swa_num_tokens_evicted == 0 and result.mamba_num_evicted == 0
    assert_empty_tree(full)


def test_evict_basic(full):
    P = full.ps
    full.insert(seq(1, 2, P))
    full.insert(seq(500, 2, P))
    assert full.cache.full_evictable_size() == 4 * P
    result = full.evict(2 * P)
    # one whole 2-page leaf goes, the oldest one
    assert result.num_tokens_evicted == 2 * P
    assert full.cache.full_evictable_size() == 2 * P
    assert full.cache.available_size() == full.cache.total_size() - 2 * P


def test_evict_respects_lru_order(full):
    P = full.ps
    old, new = seq(1, 2, P), seq(500, 2, P)
    full.insert(old)
    full.insert(new)
    full.match(new)
    assert full.evict(2 * P).num_tokens_evicted == 2 * P
    assert matched(full, old) == 0
    assert matched(full, new) == 2 * P


def test_evict_lru_order_follows_access_not_insertion(full):
    P = full.ps
    first, second = seq(1, 2, P), seq(500, 2, P)
    full.insert(first)
    full.insert(second)
    full.match(first)  # now `second` is the least recently used
    assert full.evict(2 * P).num_tokens_evicted == 2 * P
    assert matched(full, second) == 0
    assert matched(full, first) == 2 * P


def test_evict_respects_lock_ref(full):
    cache, P = full.cache, full.ps
    a, b = seq(1, 2, P), seq(500, 2, P)
    full.insert(a)
    full.insert(b)
    node = full.match(a).last_device_node
    receipt = full.lock(node)
    assert receipt.delta == 2 * P
    assert cache.full_protected_size() == 2 * P
    assert full.evict(4 * P).num_tokens_evicted == 2 * P
    assert matched(full, a) == 2 * P
    assert matched(full, b) == 0
    full.unlock(node, receipt)
    assert cache.full_protected_size() == 0
    assert full.evict(2 * P).num_tokens_evicted == 2 * P
    assert_empty_tree(full)


def test_evict_locked_subtree_skipped(full):
    cache, P = full.cache, full.ps
    a = seq(1, 3, P)
    node = full.insert(a).last_device_node
    full.insert(seq(500, 2, P))
    receipt = full.lock(node)
    want = cache.full_evictable_size() + cache.full_protected_size()
    assert want == 5 * P
    assert full.evict(want).num_tokens_evicted == 2 * P
    assert matched(full, a) == 3 * P
    assert lock_ref(cache, node) == 1
    full.unlock(node, receipt)


def test_evict_shared_prefix_keeps_common_path(full):
    P = full.ps
    base = seq(1, 2, P)
    full.insert(base)
    a, b = base + seq(100, 2, P), base + seq(200, 2, P)
    full.insert(a)
    b_node = full.insert(b).last_device_node
    receipt = full.lock(b_node)
    # ask for everything: only `a`'s own 2 pages are evictable
    assert full.evict(6 * P).num_tokens_evicted == 2 * P
    assert matched(full, b) == 4 * P
    assert matched(full, a) == 2 * P
    full.unlock(b_node, receipt)


def test_evict_until_empty(full):
    P = full.ps
    seqs = [seq(s, 2, P) for s in (0, 100, 200, 300, 400)]
    for s in seqs:
        full.insert(s)
    assert full.cache.full_evictable_size() == 10 * P
    assert full.evict(20 * P).num_tokens_evicted == 10 * P
    assert_empty_tree(full)
    for s in seqs:
        assert matched(full, s) == 0


def test_evict_iterative_tombstone_cleanup(full):
    P = full.ps
    for pages in (2, 4, 6):
        full.insert(seq(1, pages, P))
    snap = full.cache.snapshot()
    assert [n.tokens for n in snap.non_root()] == [2 * P, 2 * P, 2 * P]
    assert full.evict(6 * P).num_tokens_evicted == 6 * P
    assert_empty_tree(full)


def test_evict_result_accounting_matches_actual(full):
    cache, P = full.cache, full.ps
    for s in (0, 100, 200, 300, 400):
        full.insert(seq(s, 2, P))
    # a request between leaves evicts whole leaves: 3 pages asked -> two 2-page leaves
    before, avail = cache.full_evictable_size(), cache.available_size()
    got = full.evict(3 * P).num_tokens_evicted
    after = cache.full_evictable_size()
    assert got == before - after == 4 * P
    assert cache.available_size() - avail == got
    before = after
    got = full.evict(before).num_tokens_evicted
    assert got == before - cache.full_evictable_size() == 6 * P
    assert_empty_tree(full)


def test_evict_cascade_parent_becomes_d_leaf(full):
    cache, P = full.cache, full.ps
    base = seq(1, 2, P)
    base_id = full.insert(base).last_device_node
    leaf = full.insert(base + seq(500, 2, P)).last_device_node
    receipt = full.lock(base_id)
    assert not cache.snapshot().node(base_id).evictable_leaf
    assert full.evict(4 * P).num_tokens_evicted == 2 * P
    snap = cache.snapshot()
    assert leaf not in {n.id for n in snap.nodes}
    assert not snap.node(base_id).evictable_leaf  # childless now, but still locked
    full.unlock(base_id, receipt)
    snap = cache.snapshot()
    assert snap.node(base_id).evictable_leaf
    assert snap.evictable_leaves == (base_id,)


def test_evict_d_leaf_set_consistency(full):
    cache, P = full.cache, full.ps
    ids = [full.insert(seq(100 * i, 2, P)).last_device_node for i in range(6)]
    assert set(cache.snapshot().evictable_leaves) == set(ids)
    # the oldest leaf comes first in eviction order
    assert cache.snapshot().evictable_leaves[0] == ids[0]
    receipt = full.lock(ids[0])
    assert set(cache.snapshot().evictable_leaves) == set(ids[1:])
    assert full.evict(2 * P).num_tokens_evicted == 2 * P
    # #0 is locked, so the next oldest (#1) went
    alive = {n.id for n in cache.snapshot().nodes}
    assert ids[0] in alive and ids[1] not in alive
    full.unlock(ids[0], receipt)
    assert set(cache.snapshot().evictable_leaves) == {ids[0], *ids[2:]}
    extra = full.insert(seq(5000, 2, P)).last_device_node
    assert set(cache.snapshot().evictable_leaves) == {ids[0], *ids[2:], extra}


def test_evict_reinsert_after_full_eviction(full):
    P = full.ps
    a = seq(1, 3, P)
    full.insert(a)
    full.evict(3 * P)
    assert_empty_tree(full)
    assert full.insert(a).prefix_len == 0
    assert matched(full, a) == 3 * P


def test_evict_for_alloc_stops_at_shortfall(full):
    cache, P = full.cache, full.ps
    total = cache.total_size()
    n = total // (2 * P)  # fill the pool with 2-page leaves
    for i in range(n):
        full.insert(seq(i * 2 * P + 1, 2, P))
    assert cache.available_size() == 0
    got = cache.evict_for_alloc(EvictParams(num_tokens=P)).num_tokens_evicted
    full.ok()
    assert got == 2 * P  # one whole leaf, not more
    assert cache.available_size() == 2 * P
