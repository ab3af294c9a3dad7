"""SWA window locks, early window release and the request flows that free
out-of-window SWA slots (spec §2.3, §2.9, §4.2, §6.10; v0.5.23 ``swa.py`` and
``common.free_swa_out_of_window_slots``), for every (page_size, window) config.

``P`` is a page, ``W`` the window, ``T = ceil(W/P)*P`` the leaf cap. Lock states are
(Full lock_ref, SWA lock_ref) per node.
"""

from __future__ import annotations

import pytest

from cache.basics.errors import LockError

from conftest import matched, seq
from swa_util import SWA_CONFIGS, SWAChecked, ceil_page, config_id, pages, reference_evicted_seqlen


@pytest.fixture(params=SWA_CONFIGS, ids=config_id)
def swa(request) -> SWAChecked:
    """A FULL+SWA cache per config (kv 256; 512 at page 16; 1024 for window 128)."""
    return SWAChecked(*request.param)


# ---- the window lock and its boundary ---------------------------------------------


def test_swa_window_lock_a6():
    """Appendix A6 (ps 1, W 4): X [0,3), Y [3,5), Z [5,6)."""
    swa = SWAChecked(1, 4, 256)
    X, Y, Z = [1, 2, 3], [4, 5], [6]
    x = swa.insert(X).last_device_node
    y = swa.insert(X + Y).last_device_node
    z = swa.insert(X + Y + Z).last_device_node
    receipt = swa.lock(z)  # Z covers 1, Y brings it to 3, X to 6 >= 4: X is the boundary
    assert swa.locks(z, y, x) == [(1, 1), (1, 1), (1, 1)]
    assert swa.boundary(x) == receipt.component_lock_uuids["swa"] is not None
    assert swa.boundary(y) is None and swa.boundary(z) is None
    assert swa.cache.protected_size("swa") == 6
    swa.unlock(z, receipt)
    assert swa.locks(z, y, x) == [(0, 0)] * 3

    # a lock whose segment reaches the root before a window: no boundary
    rx = swa.lock(x)
    assert rx.component_lock_uuids["swa"] is None and swa.locks(x) == [(1, 1)]
    # with X pinned, the SWA eviction walk skips it and tombstones Y
    r = swa.evict(swa=1)
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (0, 2)
    assert swa.swa(y).tombstone
    swa.unlock(x, rx)

    # the segment lock counts the tombstone Y: coverage 1, 3, 6 -> X stamped again
    receipt = swa.lock(z)
    assert swa.locks(z, y, x) == [(1, 1), (1, 1), (1, 1)]
    assert swa.boundary(x) == receipt.component_lock_uuids["swa"]
    assert swa.cache.protected_size("swa") == 1 + 3  # Y holds no SWA to protect
    swa.unlock(z, receipt)
    assert swa.cache.protected_size("swa") == 0
    swa.drain()


def test_swa_window_lock_boundary_follows_a_split(swa):
    """The boundary uuid marks the node's older edge: a later split of the boundary
    node moves it to the new parent, and the release stops exactly there."""
    cache, P, W, T = swa.cache, swa.ps, swa.sw, swa.tail
    U = seq(1, 1, P)
    u = swa.insert(U).last_device_node
    if P < W:  # anchor Z (one page, under a window) below B (T): B is the boundary
        B = seq(100, pages(T, P), P)
        b = swa.insert_after(u, U + B).last_device_node
        anchor = swa.insert_after(b, U + B + seq(200, 1, P)).last_device_node
        assert swa.node(b).tokens == T and swa.node(anchor).tokens == P
    else:  # one page already covers W; lock the capped two-page prefix B itself
        leaf = swa.insert_after(u, U + seq(100, 3, P)).last_device_node
        b = swa.node(leaf).parent
        B = list(swa.node(b).key)
        anchor = b
        assert swa.node(b).tokens == 2 * P
    ru = swa.lock(u)  # another holder above the boundary: over-release would show
    receipt = swa.lock(anchor)
    uuid = receipt.component_lock_uuids["swa"]
    assert uuid is not None and swa.boundary(b) == uuid
    assert swa.locks(anchor) == [(1, 1)] and swa.locks(b) == [(1, 1)]
    assert swa.locks(u) == [(2, 1)]  # Full path lock reaches u, the window does not

    swa.insert_after(u, U + B[:P] + seq(900, 1, P))  # splits B after its first page
    b1 = swa.node(b).parent
    assert b1 != u and swa.node(b1).parent == u and swa.node(b1).key == tuple(B[:P])
    assert swa.boundary(b1) == uuid and swa.boundary(b) is None
    assert swa.locks(b1, b) == [(1, 1), (1, 1)]
    assert swa.locks(u) == [(2, 1)]

    swa.unlock(anchor, receipt)
    assert swa.locks(anchor, b, b1) == [(0, 0)] * 3
    assert swa.locks(u) == [(1, 1)]  # stopped at b1: u keeps the other holder's lock
    swa.unlock(u, ru)
    assert swa.locks(u) == [(0, 0)]
    assert cache.protected_size("swa") == 0 and cache.full_protected_size() == 0
    swa.drain()


def test_swa_release_of_a_foreign_receipt_is_refused(swa):
    P = swa.ps
    a = swa.insert(seq(1, 2, P)).last_device_node
    b = swa.insert(seq(500, 2, P)).last_device_node
    receipt = swa.lock(a)
    with pytest.raises(LockError):
        swa.cache.release_window(b, receipt)
    with pytest.raises(LockError):
        swa.cache.dec_lock_ref(b, receipt)
    swa.ok()
    swa.unlock(a, receipt)
    swa.drain()


# ---- early window release -----------------------------------------------------------


def test_swa_release_window_keeps_the_full_lock(swa):
    cache, P, T = swa.cache, swa.ps, swa.tail
    long = seq(1, pages(T, P) + 2, P)
    n = len(long)
    leaf = swa.insert(long).last_device_node
    a = swa.node(leaf).parent
    receipt = swa.lock(leaf)
    assert swa.locks(leaf, a) == [(1, 1), (1, 0)]
    assert cache.protected_size("swa") == T and cache.evictable_size("swa") == 2 * P

    swa.release_window(leaf, receipt)
    assert swa.locks(leaf, a) == [(1, 0), (1, 0)]
    assert cache.protected_size("swa") == 0 and cache.evictable_size("swa") == n
    assert cache.full_protected_size() == n  # Full stays locked
    # the leaf is Full-locked, so not an evictable leaf: it keeps its SWA for now
    assert swa.swa(leaf).value_len == T and not swa.node(leaf).evictable_leaf
    with pytest.raises(LockError):
        cache.release_window(leaf, receipt)  # twice is an error ...
    swa.ok()
    assert swa.locks(leaf, a) == [(1, 0), (1, 0)]  # ... and changes nothing

    r = swa.evict(num_tokens=n, swa=n)
    # SWA is evictable now but only as tombstones; Full is still pinned
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (0, n)
    assert swa.swa(a).tombstone and swa.swa(leaf).tombstone
    assert swa.full(leaf).value_len == T and swa.full(a).value_len == 2 * P

    swa.unlock(leaf, receipt)  # releases Full only; SWA was released already
    assert swa.locks(leaf, a) == [(0, 0), (0, 0)]
    assert swa.node(leaf).evictable_leaf
    with pytest.raises(LockError):
        cache.release_window(leaf, receipt)
    swa.ok()
    swa.drain()


def test_swa_release_window_then_full_evict_leaves_a_locked_leaf(swa):
    """leaf_transition_swa_evict_spares_locked_full."""
    cache, P, T = swa.cache, swa.ps, swa.tail
    seq_a = seq(1, pages(T, P), P)
    seq_ab = seq_a + seq(500, 2, P)
    a = swa.insert(seq_a).last_device_node
    swa.insert_after(a, seq_ab)
    receipt = swa.lock(a)
    swa.release_window(a, receipt)
    assert swa.locks(a) == [(1, 0)] and a in cache.snapshot().lru["swa"]
    r = swa.evict(num_tokens=len(seq_ab))
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (2 * P, 2 * P)
    assert not swa.node(a).children and not swa.node(a).evictable_leaf
    assert a in cache.snapshot().lru["swa"]
    r = swa.evict(swa=len(seq_a))
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (0, T)
    assert swa.swa(a).tombstone and swa.full(a).value_len == T
    assert a not in cache.snapshot().lru["swa"]
    swa.unlock(a, receipt)
    swa.drain()


# ---- request flows: out-of-window SWA slots -----------------------------------------

# (ps, sw, kv, tokens, swa_evicted_seqlen after checkpoint), by hand from
# 0.5.23 free_swa_out_of_window_slots with pre_len = tokens - 1:
#   guard pre_len - W >= 1; threshold = pre_len - ceil(max(W, P) / P) * P; page floor.
EAGER = [
    (1, 4, 256, 20, 15),  # 19 - 4 = 15 (spec: newest variant)
    (4, 4, 256, 20, 12),  # 19 - 4 = 15 -> 12
    (4, 2, 256, 20, 12),  # 19 - max(2, 4) = 15 -> 12
    (16, 16, 512, 64, 32),  # 63 - 16 = 47 -> 32
    (1, 128, 1024, 200, 71),  # 199 - 128 = 71
]


@pytest.mark.parametrize("ps, sw, kv, n, evicted", EAGER, ids=[f"ps{c[0]}-sw{c[1]}" for c in EAGER])
def test_swa_eager_eviction_on_unfinished_req(ps, sw, kv, n, evicted):
    swa = SWAChecked(ps, sw, kv)
    cache, T = swa.cache, swa.tail
    tf, ts = swa.totals()
    tokens = list(range(1, n + 1))
    req = cache.new_request(tokens)
    swa.ok()
    assert swa.avail() == (tf - n, ts - n)
    cache.checkpoint(req)
    swa.ok()
    assert req.swa_evicted_seqlen == evicted
    assert swa.avail() == (tf - n, ts - (n - evicted))  # exactly the out-of-window slots
    assert req.cache_protected_len == n
    # the insert left a tombstone prefix, then the live part capped to one window
    tomb = swa.node_at(tokens[:evicted])
    assert swa.node(tomb).parent == cache.tree.root.id and swa.swa(tomb).tombstone
    leaf = req.last_node
    assert swa.node(leaf).path == tuple(tokens) and swa.node(leaf).tokens == T
    mid = swa.node(leaf).parent
    assert swa.node(mid).parent == tomb and swa.swa(mid).value_len == n - T - evicted
    assert swa.locks(leaf, mid, tomb) == [(1, 1), (1, 0), (1, 0)]
    assert swa.boundary(leaf) == req.lock.component_lock_uuids["swa"]
    assert matched(swa, tokens) == n
    cache.release_kv_cache(req)
    swa.ok()
    assert swa.avail() == (tf - n, ts - (n - evicted))
    swa.drain()


@pytest.mark.parametrize("cfg", SWA_CONFIGS, ids=config_id)
def test_swa_unfinished_req_inside_the_window_frees_nothing(cfg):
    swa = SWAChecked(*cfg)
    cache, P, W = swa.cache, swa.ps, swa.sw
    tokens = list(range(1, W + 2))  # pre_len - W = 0 < 1: the guard returns
    req = cache.new_request(tokens)
    before = swa.avail()
    cache.checkpoint(req)
    swa.ok()
    assert req.swa_evicted_seqlen == 0 and swa.avail() == before
    aligned = len(tokens) - len(tokens) % P
    assert req.cache_protected_len == aligned
    cache.release_kv_cache(req)
    swa.ok()
    swa.drain()


def _granularities():
    """(config, decode step): a page per step keeps every decode on fresh pages; a
    token per step fills part-used pages, whose SWA peers continue the request's
    last SWA page (0.5.23 alloc_decode: swa_last_loc + 1)."""
    out = []
    for cfg in SWA_CONFIGS:
        out.append(pytest.param(cfg, "page", id=f"{config_id(cfg)}-page"))
        out.append(pytest.param(cfg, "token", id=f"{config_id(cfg)}-token"))
    return out


def _decode(swa, req, tokens: int, step: int, protected: int, tree: tuple[int, int], on_step=None) -> None:
    """Decode ``tokens`` tokens, ``step`` at a time, sliding the window after each
    step; the request's SWA cursor is checked against the 0.5.23 reference and both
    pools against ``tree`` (Full, SWA cached in the tree) plus what the request holds."""
    cache, P, W = swa.cache, swa.ps, swa.sw
    tf, ts = swa.totals()
    done = 0
    while done < tokens:
        k = min(step, tokens - done)
        base = 30000 + len(req.output_ids)
        cache.extend_request(req, list(range(base, base + k)))
        swa.ok()
        done += k
        cursor = req.swa_evicted_seqlen
        cache.slide_window(req)
        swa.ok()
        expected = reference_evicted_seqlen(cursor, req.kv_len - 1, W, P, protected)
        assert req.swa_evicted_seqlen == expected
        end = ceil_page(req.kv_len, P)  # the request's own pages run to here
        assert swa.avail() == (tf - tree[0] - (end - protected), ts - tree[1] - (end - max(expected, protected)))
        if on_step is not None:
            on_step()


@pytest.mark.parametrize("cfg, grain", _granularities())
def test_swa_decode_slides_the_window_then_finishes(cfg, grain):
    """A fresh prompt decodes past its window: out-of-window SWA slots go back as it
    goes; the finished insert leaves a tombstone prefix and one live window."""
    swa = SWAChecked(*cfg)
    cache, P, W = swa.cache, swa.ps, swa.sw
    step = P if grain == "page" else 1
    tf, ts = swa.totals()
    req = cache.new_request(seq(1, 2, P))
    assert req.lock.component_lock_uuids.get("swa") is None  # a root lock: no window
    tokens = ceil_page(W, P) + 2 * P + (0 if grain == "page" else 1)
    _decode(swa, req, tokens, step, protected=0, tree=(0, 0))
    kv_len = 2 * P + tokens
    evicted = req.swa_evicted_seqlen
    # keep = ceil(max(W, P)/P)*P tokens stay live (PR #29860): never an all-tombstone leaf
    keep = ceil_page(max(W, P), P)
    assert evicted == (kv_len - 1 - keep) // P * P > 0
    tokens = req.fill_ids
    cache.release_kv_cache(req)
    swa.ok()
    aligned = kv_len - kv_len % P
    assert swa.avail() == (tf - aligned, ts - (aligned - evicted))
    tomb = swa.node_at(tokens[:evicted])
    assert swa.swa(tomb).tombstone and swa.node(tomb).parent == cache.tree.root.id
    assert aligned - evicted >= W
    assert matched(swa, tokens) == aligned
    swa.drain()


@pytest.mark.parametrize("evict_mid", [False, True], ids=["keep", "evict-prefix-swa"])
@pytest.mark.parametrize("cfg, grain", _granularities())
def test_swa_decode_past_the_window_then_release_the_prefix(cfg, grain, evict_mid):
    """slide_window never touches the prefix's window lock (0.5.23 default:
    SGLANG_OPT_RELEASE_PREFILL_SWA off); the opt-in early release is an explicit
    release_window, after which the prefix's SWA is evictable while its Full stays
    locked until the request finishes."""
    swa = SWAChecked(*cfg)
    cache, P, W, T = swa.cache, swa.ps, swa.sw, swa.tail
    step = P if grain == "page" else 1
    tf, ts = swa.totals()
    prompt = seq(1, pages(T, P) + 1, P)  # capped: A (P) and L (T)
    lp = len(prompt)
    leaf = swa.insert(prompt).last_device_node
    a = swa.node(leaf).parent
    req = cache.new_request(prompt + seq(500, 1, P))
    swa.ok()
    assert req.cache_protected_len == lp and req.last_node == leaf
    lock = req.lock
    assert swa.boundary(leaf) == lock.component_lock_uuids["swa"] is not None

    def prefix_window_held():
        assert not lock.swa_released
        assert swa.locks(leaf, a) == [(1, 1), (1, 0)]
        assert cache.protected_size("swa") == T and cache.full_protected_size() == lp

    prefix_window_held()
    past = ceil_page(W, P) + P if grain == "page" else W + 1
    _decode(swa, req, past, step, protected=lp, tree=(lp, lp), on_step=prefix_window_held)
    assert len(req.output_ids) > W

    cache.release_window(req.last_node, lock)
    swa.ok()
    assert lock.swa_released and swa.locks(leaf, a) == [(1, 0), (1, 0)]
    assert cache.protected_size("swa") == 0 and cache.full_protected_size() == lp
    if evict_mid:
        r = swa.evict(swa=lp)
        assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (0, lp)
        assert swa.swa(leaf).tombstone and swa.swa(a).tombstone
    _decode(swa, req, 2 * P + (0 if grain == "page" else 1), step, protected=lp, tree=(lp, 0 if evict_mid else lp))
    assert req.swa_evicted_seqlen > lp

    tokens, kv_len, evicted = req.fill_ids, req.kv_len, req.swa_evicted_seqlen
    cache.release_kv_cache(req)  # the old receipt releases Full only
    swa.ok()
    assert swa.locks(leaf, a) == [(0, 0), (0, 0)]
    aligned = kv_len - kv_len % P
    prefix_swa = 0 if evict_mid else lp
    assert swa.avail() == (tf - aligned, ts - prefix_swa - (aligned - evicted))
    assert swa.swa(swa.node_at(tokens[:evicted])).tombstone
    assert matched(swa, tokens) == aligned
    swa.drain()


def test_swa_decode_into_a_part_used_page_maps_swa():
    """ps 4, W 4, a 5-token prompt, one decode token: it fills the part-used page."""
    swa = SWAChecked(4, 4, 256)
    cache = swa.cache
    req = cache.new_request([1, 2, 3, 4, 5])
    _, ts = swa.totals()
    assert swa.avail()[1] == ts - 8  # two SWA pages, the second part-used
    cache.extend_request(req, [6])
    pool = cache.by_name["swa"].pool
    mapped = pool.translate(req.kv_indices)
    # the 6th token's Full slot sits in the same Full page as the 5th: its SWA peer is
    # the next slot of the 5th's SWA page, as 0.5.23's alloc_decode gives it
    assert int(mapped[5]) == int(mapped[4]) + 1
    swa.ok()
    cache.release_kv_cache(req)
    swa.ok()  # the cached [4, 8) node's SWA value must hold live slots only
    assert matched(swa, req.fill_ids) == 4
    swa.drain()


@pytest.mark.parametrize("cfg", SWA_CONFIGS, ids=config_id)
def test_swa_chunked_prefill_checkpoints_move_the_window(cfg):
    """checkpoint twice: each frees what fell out of the window and moves
    the request's lock (and its window) onto the new tail."""
    swa = SWAChecked(*cfg)
    cache, P, W, T = swa.cache, swa.ps, swa.sw, swa.tail
    tf, ts = swa.totals()
    n = 2 * (W + 2 * P)
    tokens = list(range(1, n + 1))
    req = cache.new_request(tokens)
    cache.checkpoint(req)
    swa.ok()
    first = req.swa_evicted_seqlen
    assert first == reference_evicted_seqlen(0, n - 1, W, P, 0)
    first_node = req.last_node
    cache.extend_request(req, list(range(7000, 7000 + W + 2 * P)))
    swa.ok()
    cache.checkpoint(req)
    swa.ok()
    m = req.kv_len
    second = req.swa_evicted_seqlen
    assert second == reference_evicted_seqlen(first, m - 1, W, P, n)
    aligned = m - m % P
    assert req.cache_protected_len == aligned
    assert swa.locks(first_node)[0][0] == 1  # Full path lock, via the new tail
    assert swa.locks(req.last_node) == [(1, 1)]
    assert swa.node(req.last_node).tokens <= T  # the new tail is capped to one window
    tree_swa = (n - first) + (aligned - max(second, n))
    own = ceil_page(m, P) - aligned
    assert swa.avail() == (tf - aligned - own, ts - tree_swa - own)
    assert matched(swa, req.fill_ids) == aligned
    cache.release_kv_cache(req)
    swa.ok()
    swa.drain()
