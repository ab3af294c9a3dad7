"""Upstream's Mamba cases (treecore spec §8.1 "Mamba", components spec §2.4, §6.1,
§6.14; v0.5.23 ``unified_cache/components/mamba.py``) at the tree level, for
FULL+MAMBA at page 1 and 4 and FULL+SWA+MAMBA at (page 1, window 128) and (page 64,
window 64).

Every step goes through ``MambaChecked``: invariants after each call, fingerprints
(Full KV, SWA window, the matched state) after each match, each match checked against
an independent oracle of the validator rule, and every eviction's reported counts
equal to what came back to each pool. ``P`` is a page. With SWA a fresh leaf longer
than one window is cap-split and only its lower part gets the state, so tests name
nodes by their root path (``node_at``) rather than by shape.
"""

from __future__ import annotations

import pytest
import torch

from cache import CacheError, InsertParams, MatchPrefixParams, RadixKey, Req, check_invariants, verify_match
from cache.basics.errors import InvalidValueError

from mamba_util import MAMBA_CONFIGS, MambaChecked, config_id, evicted, fp


@pytest.fixture(params=MAMBA_CONFIGS, ids=config_id)
def mc(request) -> MambaChecked:
    return MambaChecked.of(request.param)


def _swa(mc: MambaChecked, n: int) -> int:
    """SWA tokens a Full eviction of ``n`` tokens frees along with them (0 without SWA)."""
    return n if mc.sw else 0


def _violations(cache) -> set[str]:
    return {v.name for v in check_invariants(cache)}


# ---- insert / match ---------------------------------------------------------------


def test_mamba_insert_and_match(mc):
    P = mc.ps
    A = mc.seq(1, 2)
    assert mc.insert(A).prefix_len == 0
    B = A + mc.seq(1000, 1)
    assert mc.insert(B).prefix_len == 2 * P
    assert mc.match(B).prefix_len == 3 * P
    r = mc.match(A + mc.seq(9000, 1))
    assert r.prefix_len == 2 * P and r.mamba_branching_seqlen is None
    assert mc.match(mc.seq(5000, 2)).prefix_len == 0
    assert mc.cache.evictable_size("mamba") == 2 and mc.cache.protected_size("mamba") == 0
    assert mc.avail()["mamba"] == mc.totals()["mamba"] - 2
    # re-inserting a cached key: the tree keeps its state, the caller frees its own
    assert mc.insert(A).mamba_exist
    assert mc.avail()["mamba"] == mc.totals()["mamba"] - 2
    mc.drain()


def test_mamba_lru_refreshes_only_the_state_used(mc):
    """MATCH_END moves only the boundary node's own state to MRU; WALKDOWN and
    INSERT_END do nothing; a new state enters at MRU; re-inserting a cached state
    refreshes it (v0.5.23 ``refresh_lru``, ``commit_insert_component_data``)."""
    A = mc.seq(1, 2)
    B = A + mc.seq(100, 2)
    C = mc.seq(500, 2)
    D = C + mc.seq(600, 2)
    for key in (A, B, C):
        mc.insert(key)
    a, b, c = (mc.node_at(k) for k in (A, B, C))

    def lru():
        return mc.cache.snapshot().lru["mamba"]

    assert lru() == (c, b, a)
    mc.match(B)  # the ancestor's state a is not refreshed
    assert lru() == (b, c, a)
    mc.match(A)
    assert lru() == (a, b, c)
    d = mc.insert(D).last_device_node  # walking through c does not refresh it
    assert lru() == (d, a, b, c)
    assert mc.insert(A).mamba_exist
    assert lru() == (a, d, b, c)
    # a match that ends on no state (splitting C where it is one node) refreshes nothing
    mc.match(C[: mc.ps] + mc.seq(9000, 1))
    assert lru() == (a, d, b, c)
    mc.drain()


# ---- eviction ---------------------------------------------------------------------


def test_mamba_evict_only(mc):
    P = mc.ps
    short, long, s, leaf = mc.short_and_long()
    assert mc.cache.evictable_size("mamba") == 2
    full_before = mc.cache.full_evictable_size()
    r = mc.evict(mamba=1)
    # the LRU state is short's, on an internal node: tombstoned, nothing cascades
    assert evicted(r) == (0, 0, 1)
    assert not mc.has_state(s) and mc.has_state(leaf)
    assert mc.cache.full_evictable_size() == full_before == 4 * P
    assert mc.match(short).prefix_len == 0
    assert mc.match(long).prefix_len == 4 * P
    mc.drain()


def test_mamba_evict_breaks_match(mc):
    P = mc.ps
    short, long, _, _ = mc.short_and_long(tail_pages=1)
    r = mc.evict(mamba=10)
    # short's state is tombstoned, then the leaf goes whole (its Full KV included)
    assert evicted(r) == (P, _swa(mc, P), 2)
    assert mc.cache.evictable_size("mamba") == 0
    assert mc.match(long).prefix_len == 0
    assert mc.cache.full_evictable_size() == 2 * P  # short's Full KV stays
    mc.drain()


def test_mamba_evict_result_accounting(mc):
    P = mc.ps
    X = mc.seq(1, 3)
    mc.insert(X)
    r = mc.evict(num_tokens=3 * P)
    assert evicted(r) == (3 * P, _swa(mc, 3 * P), 1)
    assert mc.avail() == mc.totals()
    assert len(mc.cache.snapshot().nodes) == 1


def test_mamba_evict_cascades_on_full_leaf(mc):
    P = mc.ps
    short, long, _, _ = mc.short_and_long()
    r = mc.evict(num_tokens=2 * P)
    # the Full leaf goes with its state (and SWA); short keeps its own
    assert evicted(r) == (2 * P, _swa(mc, 2 * P), 1)
    assert mc.state_nodes() == [mc.node_at(short)]
    assert mc.match(short).prefix_len == 2 * P
    assert mc.match(long).prefix_len == 2 * P
    mc.drain()


def test_mamba_internal_tombstone_evict(mc):
    P = mc.ps
    short, long, s, leaf = mc.short_and_long()
    receipt = mc.lock(leaf)  # the leaf's state is protected, short's is not
    r = mc.evict(mamba=10)
    assert evicted(r) == (0, 0, 1)
    assert not mc.has_state(s) and mc.has_state(leaf)
    # FULL stays: every token still cached
    assert mc.cache.full_evictable_size() + mc.cache.full_protected_size() == 4 * P
    assert not mc.view(s, "full").tombstone
    assert mc.match(long).prefix_len == 4 * P
    mc.unlock(leaf, receipt)
    r = mc.evict(mamba=10)
    assert r.mamba_num_evicted == 1 and mc.cache.evictable_size("mamba") == 0
    assert mc.state_nodes() == []
    assert not mc.view(s, "full").tombstone  # the internal node's Full KV survives
    assert mc.match(short).prefix_len == 0
    mc.drain()


def test_mamba_evict_empty_tree(mc):
    r = mc.evict(num_tokens=10, mamba=5)
    assert (r.num_tokens_evicted, r.mamba_num_evicted) == (0, 0)
    mc.drain()


def test_mamba_allocation_eviction_real_components(mc):
    """AllocationEvictionRealComponents (Mamba, cache 8): a chain 2, 4, 6 pages gives
    states on ``first``, ``second`` and the leaf."""
    P = mc.ps

    def chain():
        c = MambaChecked(mc.ps, mc.sw, mc.cache.total_size(), 8)
        a, b, l = (c.seq(1, 6)[: n * P] for n in (2, 4, 6))
        for key in (a, b, l):
            c.insert(key)
        return c, c.node_at(a), c.node_at(b), c.node_at(l)

    c, first, second, leaf = chain()
    assert c.avail()["mamba"] == 5
    # the pool is short by one: the first tombstone covers it, the walk stops there
    r = c.evict_for_alloc(mamba=1)
    assert (r.num_tokens_evicted, r.mamba_num_evicted) == (0, 1)
    assert not c.has_state(first) and c.has_state(second) and c.has_state(leaf)
    c.drain()

    c, first, second, leaf = chain()
    r = c.evict(mamba=2)
    assert (r.num_tokens_evicted, r.mamba_num_evicted) == (0, 2)
    assert not c.has_state(first) and not c.has_state(second) and c.has_state(leaf)
    assert c.match(c.seq(1, 6)).prefix_len == 6 * P
    c.drain()


# ---- copy-on-write ------------------------------------------------------------------


def test_mamba_cow_on_match(mc):
    P = mc.ps
    X, Y = mc.seq(1, 2), mc.seq(700, 2)
    x = mc.insert(X).last_device_node
    y = mc.insert(Y).last_device_node
    free_before = mc.avail()["mamba"]
    # a hand-made request is not registered with the cache: its slot is checked by
    # hand and freed before the next invariant check
    req = Req("r2", X + mc.seq(7000, 1), mc.cache.tree._empty, 0, None)
    r = mc.cow_match(X + mc.seq(7000, 1), req)
    assert r.prefix_len == 2 * P and r.best_match_node == x
    assert mc.avail()["mamba"] == free_before - 1  # the request's own slot
    mc.assert_cow(req, x, X)
    assert mc.state_slot(x) == int(req.mamba_cow_src[0])  # the tree keeps its slot

    # a copy from the wrong source is caught by the fingerprint
    mc.pool.copy(torch.tensor([mc.state_slot(y)]), req.mamba_pool_idx)
    assert mc.pool.consistent(req.mamba_pool_idx)  # a real state, just not this prefix's
    assert mc.slot_fp(req.mamba_pool_idx) == fp(Y) != fp(X)
    with pytest.raises(AssertionError):
        mc.assert_cow(req, x, X)
    mc.cache.free_mamba_state(req.mamba_pool_idx)
    mc.ok()

    # a request that already holds a slot gets the copy there: no new slot
    req2 = Req("r3", X, mc.cache.tree._empty, 0, None)
    req2.mamba_pool_idx = mc.cache.alloc_mamba_state([])
    held = int(req2.mamba_pool_idx[0])
    before = mc.avail()["mamba"]
    mc.cow_match(X, req2)
    assert int(req2.mamba_pool_idx[0]) == held and mc.avail()["mamba"] == before
    mc.assert_cow(req2, x, X)
    mc.cache.free_mamba_state(req2.mamba_pool_idx)
    mc.ok()

    # no state matched: nothing to copy, no slot taken
    req3 = Req("r4", mc.seq(5000, 2), mc.cache.tree._empty, 0, None)
    before = mc.avail()["mamba"]
    assert mc.cow_match(mc.seq(5000, 2), req3).prefix_len == 0
    assert req3.mamba_pool_idx is None and req3.mamba_cow_src is None and mc.avail()["mamba"] == before
    mc.drain()


def test_mamba_wrong_tree_state_is_detected(mc):
    """A state filed under the wrong node fails both the invariant and the match proof."""
    X, Y = mc.seq(1, 2), mc.seq(700, 2)
    x = mc.insert(X).last_device_node
    y = mc.insert(Y).last_device_node
    slot = torch.tensor([mc.state_slot(x)])
    mc.pool.copy(torch.tensor([mc.state_slot(y)]), slot)
    assert "mamba.state_boundary" in _violations(mc.cache)
    result = mc.cache.match_prefix(MatchPrefixParams(RadixKey(X)))
    assert [v.name for v in verify_match(mc.cache, X, result)] == ["match.mamba_state"]
    mc.pool.write(slot, fp(X))  # put the right state back
    mc.ok()
    mc.drain()


# ---- split ----------------------------------------------------------------------------


def test_mamba_split_keeps_state_on_deeper_node(mc):
    P = mc.ps
    X = mc.seq(1, 4)
    mc.insert(X)
    # a 3-page node holding the state after X[:3P] (an insert splits X there or, when
    # the SWA cap already did, fills the stateless node)
    r = mc.insert(X[: 3 * P])
    assert not r.mamba_exist
    u = mc.node_at(X[: 3 * P])
    assert mc.node(u).tokens == 3 * P and mc.has_state(u) and mc.has_state(mc.node_at(X))
    slot = mc.state_slot(u)

    # insert splits u after one page: the state stays on the deeper node (same id)
    mc.insert(X[:P] + mc.seq(900, 1))
    top = mc.node_at(X[:P])
    assert mc.node(u).parent == top and mc.node(u).tokens == 2 * P
    assert not mc.has_state(top) and mc.view(top).lock_ref == 0
    assert mc.state_slot(u) == slot
    mc.assert_state(slot, X[: 3 * P])
    assert mc.match(X[:P] + mc.seq(5000, 1)).prefix_len == 0  # the new parent has no state

    # a match that stops inside u splits it too, and ends before it
    r = mc.match(X[: 2 * P] + mc.seq(5000, 1))
    assert r.prefix_len == 0
    mid = mc.node_at(X[: 2 * P])
    assert not mc.has_state(mid) and mc.node(u).parent == mid and mc.state_slot(u) == slot
    # a stateless existing node takes an inserted state
    assert not mc.insert(X[: 2 * P]).mamba_exist
    assert mc.match(X[: 2 * P] + mc.seq(5000, 1)).prefix_len == 2 * P
    assert mc.match(X).prefix_len == 4 * P
    mc.drain()


# ---- locks ------------------------------------------------------------------------


def test_mamba_lock_protects_only_its_state(mc):
    P = mc.ps
    short, long, s, leaf = mc.short_and_long()
    receipt = mc.lock(leaf)
    assert mc.locks(leaf) == (1,) * len(mc.names)
    assert mc.locks(s)[0] == 1 and mc.locks(s)[-1] == 0  # Full path lock, no Mamba lock
    assert mc.cache.protected_size("mamba") == 1 and mc.cache.evictable_size("mamba") == 1
    assert mc.cache.full_protected_size() == 4 * P
    r = mc.evict(num_tokens=4 * P, mamba=10)
    assert (r.num_tokens_evicted, r.mamba_num_evicted) == (0, 1)
    assert not mc.has_state(s) and mc.has_state(leaf)
    assert mc.match(long).prefix_len == 4 * P
    mc.unlock(leaf, receipt)
    assert mc.cache.protected_size("mamba") == 0 and mc.cache.evictable_size("mamba") == 1
    mc.drain()


def test_mamba_lock_on_tombstone_revived_by_insert_stays_balanced(mc):
    """PR #27147: a lock taken on a stateless node counts there; a state inserted
    under it is credited as protected, and the releases balance."""
    short, _, s, _ = mc.short_and_long()
    mc.evict(mamba=1)
    assert not mc.has_state(s)
    first = mc.lock(s)
    assert mc.locks(s)[-1] == 1 and mc.cache.protected_size("mamba") == 0
    assert not mc.insert(short).mamba_exist  # revives the state under the lock
    assert mc.has_state(s) and mc.cache.protected_size("mamba") == 1
    second = mc.lock(s)
    assert mc.locks(s)[-1] == 2
    mc.unlock(s, first)  # must not take the second holder's protection
    assert mc.locks(s)[-1] == 1 and mc.cache.protected_size("mamba") == 1
    r = mc.evict(mamba=10)
    assert mc.has_state(s) and r.mamba_num_evicted == 1  # only the unlocked leaf's state
    mc.unlock(s, second)
    assert mc.locks(s) == (0,) * len(mc.names)
    assert mc.cache.protected_size("mamba") == 0 and mc.cache.evictable_size("mamba") == 1
    mc.drain()


def test_mamba_evict_leaf_with_locked_full(mc):
    """Issue #21379: a leaf whose Full KV is locked but whose state is not is not an
    evictable leaf; Mamba eviction tombstones the state and keeps the Full KV."""
    P = mc.ps
    X = mc.seq(1, 1)
    x = mc.insert(X).last_device_node
    receipt = mc.lock(x, skip=("mamba",))
    assert mc.locks(x) == (1,) * (len(mc.names) - 1) + (0,)
    assert not mc.node(x).evictable_leaf and mc.cache.evictable_size("mamba") == 1
    r = mc.evict(mamba=1)
    assert evicted(r) == (0, 0, 1)
    assert not mc.has_state(x) and not mc.view(x, "full").tombstone
    if mc.sw:
        assert not mc.view(x, "swa").tombstone  # SWA ranks above Mamba: not cascaded
    assert mc.cache.full_protected_size() == P
    assert mc.match(X).prefix_len == 0
    mc.unlock(x, receipt)
    assert mc.node(x).evictable_leaf
    mc.drain()


def test_mamba_lock_order_full_ge_swa_ge_mamba(mc):
    X = mc.seq(1, 1)
    Y = X + mc.seq(300, 2)
    mc.insert(X)
    mc.insert(Y)
    x, y = mc.node_at(X), mc.node_at(Y)
    a, b = mc.lock(y), mc.lock(y)
    assert mc.locks(y) == (2,) * len(mc.names)
    c = mc.lock(x)
    lx = mc.locks(x)
    assert lx[0] == 3 and lx[-1] == 1 and all(p >= q for p, q in zip(lx, lx[1:]))
    # the checker catches a Mamba lock above the others on an anchor
    mc.cache.tree.node_by_id(y).data[mc.mamba.index].lock_ref += 1
    assert "lock.order" in _violations(mc.cache)
    mc.cache.tree.node_by_id(y).data[mc.mamba.index].lock_ref -= 1
    mc.ok()
    for node, receipt in ((y, a), (y, b), (x, c)):
        mc.unlock(node, receipt)
    # a lock on a stateless anchor keeps the order too (tombstones are counted)
    mc.evict(mamba=1)
    assert not mc.has_state(x)
    d = mc.lock(x)
    assert mc.locks(x) == (1,) * len(mc.names)
    mc.unlock(x, d)
    if mc.sw:  # a receipt that skipped SWA is exempt from the order check
        e = mc.lock(y, skip=("swa",))
        assert mc.locks(y) == (1, 0, 1)
        mc.unlock(y, e)
    assert mc.cache.full_protected_size() == 0 and mc.cache.protected_size("mamba") == 0
    mc.drain()


# ---- branching seqlen ---------------------------------------------------------------


def test_mamba_branching_seqlen(mc):
    P, G = mc.ps, mc.grid
    X = mc.seq(1, G // P + 1)  # one page past the first checkpoint position
    x = mc.insert(X).last_device_node
    r = mc.match(X)
    assert r.prefix_len == len(X) and r.mamba_branching_seqlen is None
    r = mc.match(X + mc.seq(9000, 1))
    assert r.prefix_len == len(X) and r.mamba_branching_seqlen is None
    # a Full hit past a grid point without a state there: branch at the grid point
    r = mc.match(X[:G] + mc.seq(9000, 1))
    assert (r.prefix_len, r.full_kv_hit_length, r.mamba_branching_seqlen) == (0, G, G)
    # the leaf's state gone (Full locked meanwhile, so the leaf stays)
    receipt = mc.lock(x, skip=("mamba",))
    mc.evict(mamba=1)
    mc.unlock(x, receipt)
    aligned = len(X) // G * G  # G, or 2G when a page is a whole grid (page 64)
    r = mc.match(X)
    assert (r.prefix_len, r.full_kv_hit_length, r.mamba_branching_seqlen) == (0, len(X), aligned)
    assert r.best_match_node == mc.cache.tree.root.id
    # a checkpoint at G: the match ends there; a branch is left only past it
    mc.insert(X[:G])
    r = mc.match(X)
    assert (r.prefix_len, r.mamba_branching_seqlen) == (G, aligned if aligned > G else None)
    mc.drain()


# ---- bad calls ----------------------------------------------------------------------


def _assert_refused_unchanged(mc: MambaChecked, call, error=CacheError, match=None, check=True) -> None:
    before = mc.cache.snapshot()
    with pytest.raises(error, match=match):
        call()
    assert mc.cache.snapshot() == before
    if check:
        mc.ok()


def test_mamba_insert_needs_one_state_slot(mc):
    P = mc.ps
    X = mc.seq(1, 2)
    mc.insert(X)
    key = X + mc.seq(300, 1)
    value = torch.cat([mc.cache.path_device_indices(mc.node_at(X)), mc.fresh(key, 2 * P)])
    bad = [None, torch.tensor([1, 2]), torch.tensor([1], dtype=torch.int32), torch.tensor(1), [1]]
    try:  # (the fresh KV is held outside the cache meanwhile: invariants checked after)
        for state in bad:
            params = InsertParams(RadixKey(key), value, mamba_value=state, prev_prefix_len=2 * P)
            insert = lambda: mc.cache.insert(params)  # noqa: E731
            _assert_refused_unchanged(mc, insert, InvalidValueError, "mamba_value", check=False)
    finally:
        mc.cache.free_kv([value[2 * P :]])
    mc.ok()
    mc.drain()


def test_mamba_cow_without_a_request_is_a_cache_error(mc):
    X = mc.seq(1, 2)
    mc.insert(X)
    _assert_refused_unchanged(mc, lambda: mc.cache.match_prefix(MatchPrefixParams(RadixKey(X), cow_mamba=True)))


def test_mamba_state_calls_need_the_component():
    from cache import UnifiedRadixCache

    cache = UnifiedRadixCache(components=("full",), kv_size=64, device="cpu")
    with pytest.raises(CacheError, match="mamba"):
        cache.alloc_mamba_state([1, 2])
    with pytest.raises(CacheError, match="mamba"):
        cache.free_mamba_state(torch.tensor([0]))
