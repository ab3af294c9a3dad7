"""Upstream's FULL+SWA cases (spec §8.1, components spec §2.3, §6, Appendix A2-A6) for
(page_size, sliding_window) in (1,4), (4,4), (4,2) (window below a page), (16,16) and
(1,128).

Every step goes through ``SWAChecked``: invariants after each call, fingerprints (Full
and the last window of SWA) after each match, and each match's length checked against
an independent oracle of the SWA validator. ``P`` is a page, ``W`` the window and
``T = ceil(W/P)*P`` the leaf window cap. Pool arithmetic is (Full available, SWA
available) measured around the call under test.
"""

from __future__ import annotations

import pytest
import torch

from cache import CacheError, InsertParams, RadixKey
from cache.tree.lru import LRUList
from cache.tree.node import TreeNode

from conftest import matched, seq
from swa_util import SWA_CONFIGS, SWAChecked, config_id, pages


@pytest.fixture(params=SWA_CONFIGS, ids=config_id)
def swa(request) -> SWAChecked:
    """A FULL+SWA cache per config (kv 256; 512 at page 16; 1024 for window 128)."""
    return SWAChecked(*request.param)


def _capped(swa) -> tuple[list[int], int, int]:
    """A key of T + 2 pages: the cap splits it into A (2 pages) and leaf L (T)."""
    P, T = swa.ps, swa.tail
    long = seq(1, pages(T, P) + 2, P)
    leaf = swa.insert(long).last_device_node
    return long, swa.node(leaf).parent, leaf


# ---- insert / match / the leaf window cap ------------------------------------------


def test_swa_insert_and_match(swa):
    P = swa.ps
    a = seq(1, 3, P)
    assert swa.insert(a).prefix_len == 0
    assert matched(swa, a) == 3 * P
    b = a + seq(1000, 1, P)
    assert swa.insert(b).prefix_len == 3 * P
    assert matched(swa, b) == 4 * P
    assert matched(swa, seq(5000, 2, P)) == 0
    # no tombstone anywhere: every prefix is a valid boundary, even shorter than W
    assert matched(swa, a[:P]) == P
    r = swa.match(a)
    assert r.last_device_node == r.last_host_node == r.best_match_node
    assert r.swa_branching_seqlen is None
    assert swa.cache.evictable_size("swa") == swa.cache.full_evictable_size() == 4 * P
    swa.drain()


def test_swa_leaf_capped_to_window_on_insert(swa):
    cache, P, T = swa.cache, swa.ps, swa.tail
    root = cache.tree.root.id
    long, parent, leaf = _capped(swa)
    assert swa.node(leaf).tokens == T and swa.swa(leaf).value_len == T
    assert parent != root and swa.node(parent).parent == root
    assert swa.node(parent).tokens == 2 * P and swa.swa(parent).value_len == 2 * P
    # the older part was rebuilt first, so the tail is more recent
    assert cache.snapshot().lru["swa"] == (leaf, parent)
    assert cache.evictable_size("swa") == cache.full_evictable_size() == len(long)

    short = seq(5000, pages(T, P), P)
    sid = swa.insert(short).last_device_node
    assert swa.node(sid).parent == root and swa.node(sid).tokens == T  # no split at exactly T

    receipt = swa.lock(leaf)
    assert cache.protected_size("swa") == T  # one window of SWA pool pinned
    assert cache.full_protected_size() == len(long)
    assert swa.boundary(leaf) == receipt.component_lock_uuids["swa"] is not None
    swa.unlock(leaf, receipt)
    assert cache.protected_size("swa") == 0 and cache.full_protected_size() == 0
    swa.drain()


@pytest.mark.parametrize("cfg", [c for c in SWA_CONFIGS if 8 * c[0] >= c[1] + c[0]], ids=config_id)
def test_swa_lru_fresh_leaf_cap_rebuilds_both_nodes(cfg):
    swa = SWAChecked(*cfg)
    P, W = swa.ps, swa.sw
    leaf = swa.insert(seq(1, 8, P)).last_device_node
    parent = swa.node(leaf).parent
    assert swa.cache.snapshot().lru["swa"] == (leaf, parent)
    assert not swa.node(leaf).children
    assert swa.node(leaf).tokens < W + P
    assert swa.node(leaf).tokens + swa.node(parent).tokens == 8 * P
    assert swa.cache.evictable_size("swa") == 8 * P
    swa.drain()


@pytest.mark.parametrize("cfg", [c for c in SWA_CONFIGS if 8 * c[0] >= c[1] + c[0]], ids=config_id)
def test_swa_lru_pinning_family(cfg):
    """Walk-down refreshes nothing; match/insert end refresh about one window."""
    ps, sw, kv = cfg
    swa = SWAChecked(ps, sw, 2 * kv)  # 37 pages cached: nothing may be evicted on the way
    P = swa.ps
    A, B, C, D = (seq(s, 8, P) for s in (1000, 2000, 3000, 4000))
    side = A + seq(5000, 5, P)
    a_t = swa.insert(A).last_device_node
    b_t = swa.insert_after(a_t, A + B).last_device_node
    c_t = swa.insert_after(b_t, A + B + C).last_device_node
    s_t = swa.insert_after(a_t, side).last_device_node
    a_p, b_p, c_p, s_p = (swa.node(t).parent for t in (a_t, b_t, c_t, s_t))
    lru = swa.cache.snapshot().lru["swa"]
    assert lru == (s_t, s_p, c_t, c_p, b_t, b_p, a_t, a_p)  # tails at even MRU positions

    d_t = swa.insert_after(c_t, A + B + C + D).last_device_node
    d_p = swa.node(d_t).parent
    assert swa.cache.snapshot().lru["swa"] == (d_t, d_p, s_t, s_p, c_t, c_p, b_t, b_p, a_t, a_p)

    assert matched(swa, A + B + C) == 24 * P
    lru = swa.cache.snapshot().lru["swa"]
    assert lru[:2] == (c_t, c_p)  # only C's two nodes moved
    assert lru[2:] == (d_t, d_p, s_t, s_p, b_t, b_p, a_t, a_p)

    r = swa.evict(swa=P)  # A's prefix, the LRU tail, is internal: tombstoned
    assert r.swa_num_tokens_evicted == swa.node(a_p).tokens and r.num_tokens_evicted == 0
    assert swa.swa(a_p).tombstone
    assert matched(swa, side) == len(side)  # A's tail and the side still cover a window
    for _ in range(3):
        assert matched(swa, A + B + C + D) == 32 * P
    swa.drain()


def test_swa_partial_match_keeps_unmatched_suffix_lru_position(swa):
    """A match that stops inside cold's (possibly capped) path refreshes only what it
    matched: hot stays ahead of cold's leaf in the SWA LRU."""
    P = swa.ps
    cold, hot = seq(1, 2, P), seq(100, 2, P)
    cold_leaf = swa.insert(cold).last_device_node
    hot_leaf = swa.insert(hot).last_device_node
    assert matched(swa, cold[:P]) == P
    lru = swa.cache.snapshot().lru["swa"]
    assert lru.index(hot_leaf) < lru.index(cold_leaf)
    assert swa.node(cold_leaf).key == tuple(cold[P:])  # split (or already capped) at the page
    swa.drain()


def _chain(lengths: list[int]):
    """A root and a chain of TreeNodes (first is the top), each ``lengths[i]`` long."""
    root = TreeNode(0, 2, 0.0)
    nodes, parent = [], root
    for i, n in enumerate(lengths, start=1):
        node = TreeNode(i, 2, 0.0)
        node.parent, node.length = parent, n
        nodes.append(node)
        parent = node
    return root, nodes


@pytest.mark.parametrize(
    "lengths, initial_mru, absent, window, after",
    [
        ([2, 2, 2, 2], "DCBA", "", 5, "DCBA"),  # (a) D, C, B refreshed; A untouched
        ([2, 2, 2, 2], "DCA", "B", 5, "DCA"),  # (b) B counted but skipped; A not visited
        ([3, 3, 3, 3], "ABCD", "", 5, "DCAB"),  # (c)
        ([2, 2], "AB", "", 1000, "BA"),  # (d) stops at the root
        ([2, 2, 2, 2], "ABCD", "", 0, "ABCD"),  # (e) window 0: no-op
    ],
)
def test_lru_bounded_refresh(lengths, initial_mru, absent, window, after):
    """UnifiedLRUListBoundedRefreshTest: reset_node_and_window_ancestors_mru."""
    root, nodes = _chain(lengths)
    name = dict(zip("ABCD", nodes))
    lru = LRUList(1, 2)
    for letter in reversed(initial_mru):  # insert LRU first so the MRU end comes out right
        lru.insert_mru(name[letter])
    deepest = nodes[-1]
    lru.promote_path(deepest, root, lambda n: n in lru, window=window)
    assert "".join(next(k for k, v in name.items() if v is n) for n in lru) == after
    assert all(name[x] not in lru for x in absent)


# ---- eviction: tombstones and the cascade -------------------------------------------


def test_swa_eviction_tombstones_internal_node_and_deletes_leaf(swa):
    cache, P, T = swa.cache, swa.ps, swa.tail
    tf, ts = swa.totals()
    long, a, leaf = _capped(swa)
    n = len(long)
    assert swa.avail() == (tf - n, ts - n)

    r = swa.evict(swa=1)  # LRU tail is A, an internal node: tombstone, Full stays
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (0, 2 * P)
    assert swa.swa(a).tombstone and swa.full(a).value_len == 2 * P
    assert swa.swa(leaf).value_len == T
    assert not swa.node(a).evictable_leaf and swa.node(leaf).evictable_leaf
    assert swa.avail() == (tf - n, ts - T)
    assert cache.evictable_size("swa") == T and cache.full_evictable_size() == n
    assert cache.snapshot().lru["swa"] == (leaf,)
    assert matched(swa, long) == n  # the leaf alone covers a window after the gap
    assert matched(swa, long[: 2 * P]) == 0

    r = swa.evict(swa=1)  # the leaf is an evictable leaf: deleted whole
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (T, T)
    assert leaf not in cache.tree.nodes
    assert swa.node(a).evictable_leaf and swa.swa(a).tombstone  # a Full-only leaf
    assert swa.avail() == (tf - 2 * P, ts)
    assert matched(swa, long) == 0

    r = swa.evict(num_tokens=1)
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (2 * P, 0)
    assert swa.avail() == (tf, ts) and len(cache.snapshot().nodes) == 1


def test_swa_full_eviction_cascades_to_swa(swa):
    P, T = swa.ps, swa.tail
    tf, ts = swa.totals()
    long, a, leaf = _capped(swa)
    r = swa.evict(num_tokens=1)  # the only evictable leaf goes, SWA with it
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (T, T)
    assert swa.node(a).evictable_leaf and swa.swa(a).value_len == 2 * P
    assert swa.avail() == (tf - 2 * P, ts - 2 * P)
    assert matched(swa, long) == 2 * P
    r = swa.evict(num_tokens=1)
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (2 * P, 2 * P)
    assert swa.avail() == (tf, ts)


def test_swa_combined_evict_counts_the_cascade(swa):
    """One evict asking for both: what the Full walk freed on SWA counts toward the
    SWA request (spec §2.6 step 2), so the SWA walk only runs for the rest."""
    P, T = swa.ps, swa.tail
    long, a, leaf = _capped(swa)
    r = swa.evict(num_tokens=1, swa=T)  # the Full walk deletes the leaf: SWA already satisfied
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (T, T)
    assert swa.swa(a).value_len == 2 * P

    again = SWAChecked(swa.ps, swa.sw, swa.cache.total_size())
    long, a, leaf = _capped(again)
    r = again.evict(num_tokens=1, swa=T + 1)
    # the SWA walk then finds A, now an evictable leaf, and deletes it whole
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (T + 2 * P, T + 2 * P)
    assert len(again.cache.snapshot().nodes) == 1 and again.avail() == again.totals()
    swa.drain()


def test_swa_full_eviction_follows_lru(swa):
    P, T = swa.ps, swa.tail
    a, b = seq(1, pages(T, P), P), seq(500, pages(T, P), P)
    swa.insert(a)
    swa.insert(b)
    matched(swa, a)  # a is now the more recent
    r = swa.evict(num_tokens=1)
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (T, T)
    assert matched(swa, b) == 0 and matched(swa, a) == T
    swa.drain()


def test_swa_lock_protects_from_eviction(swa):
    cache, P, T = swa.cache, swa.ps, swa.tail
    long, a, leaf = _capped(swa)
    receipt = swa.lock(leaf)  # SWA window: the leaf alone (T >= W); Full: the path
    assert swa.locks(leaf, a) == [(1, 1), (1, 0)]
    r = swa.evict(num_tokens=10 * len(long), swa=10 * len(long))
    # only A's SWA was unlocked; the Full path and the leaf's window are pinned
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (0, 2 * P)
    assert swa.swa(a).tombstone and swa.swa(leaf).value_len == T
    assert matched(swa, long) == len(long)
    swa.unlock(leaf, receipt)
    assert cache.evictable_size("swa") == T
    swa.drain()


def _chain_of_windows(swa, swa_kv_size: int | None = None):
    """first, second, leaf: three nodes of T tokens each, inserted as a request would
    (only the new part gets fresh slots)."""
    P, T = swa.ps, swa.tail
    keys = [seq(1, pages(T, P), P)]
    keys.append(keys[0] + seq(100, pages(T, P), P))
    keys.append(keys[1] + seq(200, pages(T, P), P))
    ids, prev = [], 0
    for key in keys:
        value = swa.fresh(key, prev)
        if prev:
            value = torch.cat([swa.cache.path_device_indices(ids[-1]), value])
        ids.append(swa.raw_insert(key, value, prev_prefix_len=prev).last_device_node)
        prev = len(key)
    assert swa.cache.snapshot().lru["swa"] == (ids[2], ids[1], ids[0])
    return keys, ids


@pytest.mark.parametrize("cfg", SWA_CONFIGS, ids=config_id)
def test_swa_evict_for_alloc_stops_at_the_shortfall(cfg):
    """AllocationEvictionRealComponents: an allocation short of SWA tombstones only
    as much as it lacks; Full is untouched."""
    ps, sw, kv = cfg
    T = -(-sw // ps) * ps
    swa = SWAChecked(ps, sw, kv, swa_kv_size=3 * T + ps)
    keys, (first, second, leaf) = _chain_of_windows(swa)
    tf, ts = swa.totals()
    assert swa.avail() == (tf - 3 * T, ps)
    req = swa.cache.new_request(seq(9000, pages(T, ps) + 1, ps))  # T + P fresh: T short
    swa.ok()
    assert swa.swa(first).tombstone
    assert swa.swa(second).value_len == T and swa.swa(leaf).value_len == T
    assert swa.avail() == (tf - 3 * T - T - ps, 0)  # nothing of Full was evicted
    assert swa.cache.full_evictable_size() == 3 * T
    swa.cache.release_kv_cache(req, checkpoint=False)
    swa.ok()

    again = SWAChecked(ps, sw, kv)
    keys, (first, second, leaf) = _chain_of_windows(again)
    r = again.evict(swa=2 * T)  # a plain evict: both internal nodes, the leaf kept
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (0, 2 * T)
    assert again.swa(first).tombstone and again.swa(second).tombstone
    assert again.swa(leaf).value_len == T
    assert matched(again, keys[2]) == 3 * T  # the leaf alone covers the window
    again.drain()
    swa.drain()


def test_swa_insert_with_unaligned_evicted_seqlen_is_refused_cleanly():
    swa = SWAChecked(4, 4, 256)
    cache = swa.cache
    base = seq(1, 2, 4)
    swa.insert(base)
    tokens = base[:4] + seq(100, 2, 4)
    req = cache.new_request(tokens)  # holds the shared page (tree) and 8 fresh slots
    swa.ok()
    before = cache.snapshot()
    with pytest.raises(CacheError):
        cache.insert(InsertParams(RadixKey(tokens), req.kv_indices, prev_prefix_len=4, swa_evicted_seqlen=6))
    assert cache.snapshot().nodes == before.nodes
    swa.ok()


# ---- a match stops before a gap shorter than the window ------------------------------


def test_swa_match_stops_before_a_short_run_after_a_gap(swa):
    """Path X (live), G (tombstone), Y (1 page), Z (T), G2 (tombstone), Y2 (1 page)."""
    P, W, T = swa.ps, swa.sw, swa.tail
    X, G, Y, Z = seq(1, 2, P), seq(100, 1, P), seq(200, 1, P), seq(300, pages(T, P), P)
    G2, Y2 = seq(400, 1, P), seq(500, 1, P)
    XG, XGY = X + G, X + G + Y
    XGYZ = XGY + Z
    swa.insert(X)
    before = swa.avail()
    g = swa.insert(XG, swa_evicted_seqlen=len(XG)).last_device_node  # wholly out of window
    # X's incoming slots were duplicates; their SWA side was already gone (full-only free)
    assert swa.avail() == (before[0] - P, before[1])
    assert swa.swa(g).tombstone and swa.full(g).value_len == P
    y = swa.insert(XGY, swa_evicted_seqlen=len(XG)).last_device_node
    assert swa.swa(g).tombstone and swa.swa(y).value_len == P
    swa.insert(XGYZ, swa_evicted_seqlen=len(XG))
    swa.insert(XGYZ + G2, swa_evicted_seqlen=len(XGYZ) + P)
    swa.insert(XGYZ + G2 + Y2, swa_evicted_seqlen=len(XGYZ) + P)
    assert swa.swa(swa.node_at(XGYZ + G2)).tombstone

    assert matched(swa, XG) == 2 * P  # back to before the gap
    assert swa.match(XG).swa_branching_seqlen == 3 * P
    assert matched(swa, XGY) == (3 * P + P if P >= W else 2 * P)
    assert matched(swa, XGYZ) == len(XGYZ)  # Y + Z cover a window since the gap
    # stopping one page into Z: Y + one page of Z
    assert matched(swa, XGY + Z[:P]) == (len(XGY) + P if 2 * P >= W else 2 * P)
    # after the second gap one page covers a window only when P >= W; else back to Z
    assert matched(swa, XGYZ + G2 + Y2) == (len(XGYZ) + 2 * P if P >= W else len(XGYZ))
    assert matched(swa, X + seq(9000, 1, P)) == 2 * P
    swa.drain()


# ---- recovery on re-insert ---------------------------------------------------------


@pytest.mark.parametrize("extend", [False, True], ids=["same-key", "extended"])
def test_swa_recovery_of_a_tombstone_in_window(swa, extend):
    """Case 1 (e <= s): the node takes the incoming slots; its old Full is freed Full-side only."""
    P = swa.ps
    key = seq(1, 2, P)
    n = len(key)
    value = swa.fresh(key)
    swa.cache.free_swa(value)
    before = swa.avail()
    node = swa.raw_insert(key, value, swa_evicted_seqlen=n).last_device_node
    # swa_insert_keeps_full_leaf_when_entire_span_is_outside_window
    assert swa.avail() == before
    assert torch.equal(swa.full_value(node), value) and swa.swa(node).tombstone
    assert matched(swa, key) == 0

    new = key + (seq(500, 1, P) if extend else [])
    fresh = swa.fresh(new)
    before = swa.avail()
    r = swa.raw_insert(new, fresh, swa_evicted_seqlen=0)
    assert r.prefix_len == n
    assert swa.avail() == (before[0] + n, before[1])  # only the old Full slots came back
    assert torch.equal(swa.full_value(node), fresh[:n])
    assert swa.swa(node).value_len == n
    assert swa.cache.evictable_size("swa") == len(new) == swa.cache.full_evictable_size()
    assert matched(swa, new) == len(new)
    swa.drain()


def test_swa_partial_recovery_splits_at_the_window_edge(swa):
    """Case 2 (s < e < s+p): split at e; only the in-window lower part recovers."""
    P, T = swa.ps, swa.tail
    key = seq(1, 1 + pages(T, P), P)  # P + T
    n = len(key)
    node = swa.insert(key, swa_evicted_seqlen=n).last_device_node
    assert swa.node(node).tokens == n  # a tombstone leaf is not capped
    old = swa.full_value(node)

    fresh = swa.fresh(key)
    swa.cache.free_swa(fresh[:P])
    before = swa.avail()
    r = swa.raw_insert(key, fresh, swa_evicted_seqlen=P)
    assert r.prefix_len == n and r.last_device_node == node
    # old Full [P, n) and the out-of-window incoming [0, P) are freed, both Full-side only
    assert swa.avail() == (before[0] + n, before[1])
    upper = swa.node(node).parent
    assert swa.node(upper).parent == swa.cache.tree.root.id
    assert swa.node(upper).key == tuple(key[:P]) and swa.swa(upper).tombstone
    assert torch.equal(swa.full_value(upper), old[:P])
    assert swa.node(node).tokens == T and swa.swa(node).value_len == T
    assert torch.equal(swa.full_value(node), fresh[P:])
    assert swa.cache.evictable_size("swa") == T and swa.cache.full_evictable_size() == n
    assert matched(swa, key) == n
    assert matched(swa, key[:P]) == 0
    swa.drain()


@pytest.mark.parametrize("extend", [False, True], ids=["same-key", "extended"])
def test_swa_recovery_fully_outside_window_stays_tombstone(swa, extend):
    """Case 3 (e >= s+p): nothing recovers; the incoming duplicates are freed."""
    P, W = swa.ps, swa.sw
    key = seq(1, 2, P)
    n = len(key)
    node = swa.insert(key, swa_evicted_seqlen=n).last_device_node
    old = swa.full_value(node)
    new = key + (seq(500, 1, P) if extend else [])
    fresh = swa.fresh(new)
    swa.cache.free_swa(fresh[:n])
    before = swa.avail()
    swa.raw_insert(new, fresh, swa_evicted_seqlen=n)
    assert swa.avail() == (before[0] + n, before[1])
    assert swa.swa(node).tombstone and torch.equal(swa.full_value(node), old)
    assert matched(swa, key) == 0
    if extend:
        leaf = swa.node_at(new)
        assert swa.swa(leaf).value_len == P
        assert matched(swa, new) == (len(new) if P >= W else 0)
    swa.drain()


def _locked_tombstone(swa):
    """t (T tokens, internal: a one-page child below) with its SWA evicted."""
    P, T = swa.ps, swa.tail
    t = seq(1, pages(T, P), P)
    node = swa.insert(t).last_device_node
    child = swa.insert(t + seq(700, 1, P)).last_device_node
    r = swa.evict(swa=1)
    assert r.swa_num_tokens_evicted == T and swa.swa(node).tombstone
    receipt = swa.lock(node)
    assert swa.locks(node) == [(1, 1)]  # the segment lock counts the tombstone
    assert swa.boundary(node) == receipt.component_lock_uuids["swa"] is not None
    return t, node, child, receipt


def test_swa_locked_full_recovery_keeps_the_old_full(swa):
    cache, P, T = swa.cache, swa.ps, swa.tail
    t, node, child, receipt = _locked_tombstone(swa)
    old = swa.full_value(node)
    fresh = swa.fresh(t)
    before = swa.avail()
    r = swa.raw_insert(t, fresh, swa_evicted_seqlen=0)
    assert r.prefix_len == T and r.last_device_node == node
    assert swa.avail() == (before[0] + T, before[1])  # incoming Full freed, its SWA kept
    assert torch.equal(swa.full_value(node), old)  # the lock holder's slots stay valid
    assert swa.swa(node).value_len == T and swa.locks(node) == [(1, 1)]
    assert cache.protected_size("swa") == T and cache.evictable_size("swa") == P
    assert matched(swa, t) == T  # old Full slots now reach the incoming SWA KV
    swa.unlock(node, receipt)
    assert cache.evictable_size("swa") == T + P and cache.protected_size("swa") == 0
    swa.drain()


def test_swa_locked_full_partial_recovery(swa):
    """A locked tombstone recovered from inside: the split copies the locks, the
    boundary uuid moves to the upper half, the lower half gets SWA with its old Full."""
    cache, P, T = swa.cache, swa.ps, swa.tail
    key = seq(1, 1 + pages(T, P), P)
    n = len(key)
    node = swa.insert(key, swa_evicted_seqlen=n).last_device_node
    swa.insert(key + seq(700, 1, P), swa_evicted_seqlen=n)  # a child; the node stays a tombstone
    assert swa.swa(node).tombstone
    receipt = swa.lock(node)
    uuid = receipt.component_lock_uuids["swa"]
    assert uuid is not None and swa.boundary(node) == uuid
    old = swa.full_value(node)

    fresh = swa.fresh(key)
    swa.cache.free_swa(fresh[:P])
    before = swa.avail()
    swa.raw_insert(key, fresh, swa_evicted_seqlen=P)
    assert swa.avail() == (before[0] + n, before[1])
    upper = swa.node(node).parent
    assert swa.locks(upper, node) == [(1, 1), (1, 1)]
    assert swa.boundary(upper) == uuid and swa.boundary(node) is None
    assert swa.swa(upper).tombstone and torch.equal(swa.full_value(upper), old[:P])
    assert torch.equal(swa.full_value(node), old[P:]) and swa.swa(node).value_len == T
    assert cache.protected_size("swa") == T
    assert matched(swa, key) == n
    swa.unlock(node, receipt)
    assert swa.locks(upper, node) == [(0, 0), (0, 0)]
    swa.drain()


def test_swa_unfinished_req_over_a_locked_tombstone(swa):
    """The request's match is rejected (tombstone), its insert recovers the locked node:
    the request adopts the node's old Full slots, its own fresh Full goes back."""
    cache, P, T = swa.cache, swa.ps, swa.tail
    t, node, child, receipt = _locked_tombstone(swa)
    old = swa.full_value(node)
    req = cache.new_request(t)
    swa.ok()
    assert req.cache_protected_len == 0 and req.last_node == cache.tree.root.id
    before = swa.avail()
    cache.checkpoint(req)
    swa.ok()
    # the match's Full hit ran past its live window (swa_branching_seqlen = T): this first
    # checkpoint is that branch insert, whose cleanup slides the window, which raises the
    # floor to the now tree-owned prefix (v0.5.23 free_swa_out_of_window_slots: dead_lo),
    # unless the window has not moved at all yet (pre_len - window < evicted + 1)
    pre_len = len(t) - 1
    assert req.swa_branching_seqlen is None
    assert req.swa_evicted_seqlen == (T if pre_len - swa.sw >= 1 else 0)
    assert swa.avail() == (before[0] + T, before[1])
    assert req.cache_protected_len == T and req.last_node == node
    assert torch.equal(req.kv_indices, old)
    assert swa.locks(node) == [(2, 2)] and swa.swa(node).value_len == T
    cache.release_kv_cache(req)
    swa.ok()
    assert swa.locks(node) == [(1, 1)]
    swa.unlock(node, receipt)
    tf, ts = swa.totals()
    assert swa.avail() == (tf - T - P, ts - T - P)
    swa.drain()
