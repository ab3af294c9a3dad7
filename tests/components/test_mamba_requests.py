"""Mamba request flows, allocation under pressure and the SWA+Mamba lock/cascade
cases (components spec §2.4 prepare/cleanup, §4.3, §6.6, §6.8; treecore spec §8.1
"SWA + Mamba lock/cascade", §8.4; v0.5.23 ``mamba.py``) for FULL+MAMBA at page 1 and 4
and FULL+SWA+MAMBA at (page 1, window 128) and (page 64, window 64).

Page 1 has no extra buffer: the request's running state is what gets cached (a fork
of it while unfinished). Pages 4 and 64 track checkpoint states every
``G = lcm(max(64, page), page)`` tokens into two ping-pong slots; the newest tracked
one is what the tree gets (the keep index), donated while unfinished. A request
holds ``s`` state slots: 1, or 3 with the extra buffer. Every step goes through
``MambaChecked`` (invariants after each call, fingerprints after each match).
"""

from __future__ import annotations

import dataclasses

import pytest

from cache import EvictParams, MatchPrefixParams, RadixKey, Req, check_invariants
from cache.basics.errors import PoolExhaustedError, ReferenceAssertsError

from mamba_util import HYBRID_CONFIGS, MAMBA_CONFIGS, MambaChecked, config_id, evicted


@pytest.fixture(params=MAMBA_CONFIGS, ids=config_id)
def mc(request) -> MambaChecked:
    return MambaChecked.of(request.param)


def _tracked(n: int, G: int) -> int:
    return n - n % G


def _shape(snap) -> tuple:
    """Nodes, paths, per-component presence, locks and state slots (no access times,
    no SWA boundary stamps: a released lock leaves its stamp behind)."""
    return tuple(
        (n.id, n.path, tuple((c.value_len, c.lock_ref, c.extras.get("slot")) for c in n.components.values()))
        for n in snap.nodes
    )


# ---- finished requests -------------------------------------------------------------


def test_finished_request_caches_its_state(mc):
    P, G = mc.ps, mc.grid
    base = mc.avail()
    tokens = mc.seq(1, G // P + 1)
    req = mc.new_request(tokens)
    assert mc.avail()["mamba"] == base["mamba"] - mc.slots_per_req
    mc.assert_state(req.mamba_pool_idx, tokens)
    out = mc.seq(7000, G // P)  # decode across the next grid point
    if not mc.extra_buffer:
        assert req.mamba_ping_pong is None and req.mamba_last_track_seqlen is None
        mc.extend(req, out)
        running = int(req.mamba_pool_idx[0])
        mc.assert_state(running, tokens + out)
        mc.finish(req)
        cached = tokens + out
        node = mc.node_at(cached)
        assert mc.state_slot(node) == running  # the running state became the tree's
    else:
        t0 = _tracked(len(tokens), G)
        assert (req.mamba_last_track_seqlen, req.mamba_prev_track_seqlen, req.mamba_next_track_idx) == (t0, None, 1)
        mc.assert_state(req.mamba_ping_pong[0:1], tokens[:t0])
        mc.extend(req, out)
        fill = tokens + out
        t1 = _tracked(len(fill), G)
        assert t1 == t0 + G
        assert (req.mamba_last_track_seqlen, req.mamba_prev_track_seqlen, req.mamba_next_track_idx) == (t1, t0, 0)
        mc.assert_state(req.mamba_ping_pong[1:2], fill[:t1])
        mc.assert_state(req.mamba_ping_pong[0:1], tokens[:t0])  # the older checkpoint stays
        mc.assert_state(req.mamba_pool_idx, fill)
        tracked_slot = int(req.mamba_ping_pong[1])
        mc.finish(req)
        assert req.mamba_keep_idx == 1  # the newest tracked slot
        cached = fill[:t1]  # only up to the checkpoint: nothing past it has a state
        node = mc.node_at(cached)
        assert mc.state_slot(node) == tracked_slot
    assert mc.avail()["mamba"] == base["mamba"] - 1
    assert mc.avail()["full"] == base["full"] - len(cached)
    r = mc.match(tokens + out)
    assert r.prefix_len == len(cached) and r.mamba_branching_seqlen is None
    mc.drain()


@pytest.mark.parametrize("cfg", [c for c in MAMBA_CONFIGS if 1 < c[0] < 64], ids=config_id)
def test_finished_request_without_a_checkpoint_caches_nothing(cfg):
    """Extra buffer, prompt shorter than G: no tracked state, so nothing is inserted
    and every slot goes back."""
    mc = MambaChecked.of(cfg)
    tokens = mc.seq(1, 2)
    assert len(tokens) < mc.grid
    req = mc.new_request(tokens)
    assert req.mamba_last_track_seqlen is None
    mc.finish(req)
    assert len(mc.cache.snapshot().nodes) == 1
    assert mc.avail() == mc.totals()


def test_finished_request_without_insert_frees_everything(mc):
    P = mc.ps
    X = mc.seq(1, 1)
    x = mc.insert(X).last_device_node
    base = mc.avail()
    req = mc.new_request(X + mc.seq(500, mc.grid // P + 1))
    assert req.cache_protected_len == P and req.last_node == x
    assert int(req.mamba_cow_src[0]) == mc.state_slot(x)  # copied from the prefix's state
    assert mc.locks(x) == (1,) * len(mc.names) and mc.cache.protected_size("mamba") == 1
    mc.extend(req, mc.seq(7000, 1))
    mc.finish(req, insert=False)
    assert mc.avail() == base
    assert mc.locks(x) == (0,) * len(mc.names) and mc.cache.protected_size("mamba") == 0
    assert mc.state_nodes() == [x]
    mc.drain()


# ---- unfinished requests -----------------------------------------------------------


def test_unfinished_request_forks_or_donates(mc):
    P, G = mc.ps, mc.grid
    base = mc.avail()["mamba"]
    s = mc.slots_per_req
    tokens = mc.seq(1, G // P + 1)
    req = mc.new_request(tokens)
    running = int(req.mamba_pool_idx[0])
    t0 = len(tokens) if not mc.extra_buffer else _tracked(len(tokens), G)
    ping_pong = None if req.mamba_ping_pong is None else req.mamba_ping_pong.clone()
    mc.unfinished(req)
    node = mc.node_at(tokens[:t0])
    slot = mc.state_slot(node)
    mc.assert_state(slot, tokens[:t0])
    assert mc.avail()["mamba"] == base - s - 1  # the tree's new state is an extra slot
    assert int(req.mamba_pool_idx[0]) == running  # the running state stays the request's
    if mc.extra_buffer:  # the tracked slot was donated, a fresh one took its place
        assert slot == int(ping_pong[0]) and int(req.mamba_ping_pong[0]) != slot
        assert int(req.mamba_ping_pong[1]) == int(ping_pong[1])
    else:  # a fork of the running state
        assert slot != running
    assert req.mamba_last_track_seqlen is None and req.mamba_prev_track_seqlen is None
    assert req.cache_protected_len == t0 and req.last_node == node
    assert mc.locks(node) == (1,) * len(mc.names)

    # again with nothing new: the tree has the state; a fork is freed, nothing tracked
    shape = _shape(mc.cache.snapshot())
    mc.unfinished(req)
    assert mc.avail()["mamba"] == base - s - 1 and mc.state_slot(node) == slot
    assert _shape(mc.cache.snapshot()) == shape

    # a second request on the same prompt: its fork/donation duplicates the tree's
    req2 = mc.new_request(tokens)
    assert int(req2.mamba_cow_src[0]) == slot
    mc.unfinished(req2)
    assert mc.avail()["mamba"] == base - 2 * s - 1 and mc.state_slot(node) == slot

    # decode across the next grid point: a deeper state is cached
    out = mc.seq(7000, G // P)
    mc.extend(req, out)
    mc.unfinished(req)
    t1 = len(tokens + out) if not mc.extra_buffer else _tracked(len(tokens + out), G)
    deep = mc.node_at((tokens + out)[:t1])
    mc.assert_state(mc.state_slot(deep), (tokens + out)[:t1])
    assert mc.avail()["mamba"] == base - 2 * s - 2
    assert req.cache_protected_len == t1 and mc.locks(node)[-1] == 1  # req2 still holds it
    mc.finish(req)  # cached already (or nothing newly tracked): every request slot goes back
    assert mc.avail()["mamba"] == base - s - 2
    mc.finish(req2)
    assert mc.avail()["mamba"] == base - 2
    mc.drain()


# ---- allocation under pressure -----------------------------------------------------

N = 4  # test_mamba_donated_alloc_ratio.py


def _but_its_match(snap):
    """A snapshot without what a refused admission's match leaves (access times, the
    match counters, the SWA window's boundary mark its copy-on-write lock set): SGLang's
    scheduler matches a request before it allocates its slots."""
    def unmarked(view):
        extras = {k: v for k, v in view.extras.items() if k != "boundary"}
        return dataclasses.replace(view, extras=extras)

    nodes = tuple(dataclasses.replace(n, last_access_time=0.0, evict_key=None, evict_note=None,
                                      components={k: unmarked(v) for k, v in n.components.items()})
                  for n in snap.nodes)
    return dataclasses.replace(snap, nodes=nodes, metrics=None)


def _pressured(cfg, mamba_size: int) -> MambaChecked:
    return MambaChecked.of(cfg, mamba_size=mamba_size)


def _prefixes(mc: MambaChecked) -> list[list[int]]:
    keys = [mc.seq(100 * (i + 1), 1) for i in range(N)]
    for key in keys:
        mc.insert(key)
    return keys


@pytest.mark.parametrize("cfg", MAMBA_CONFIGS, ids=config_id)
def test_full_mamba_pool_evicts_an_unlocked_state(cfg):
    mc = _pressured(cfg, 4)
    P = mc.ps
    keys = [mc.seq(100 * (i + 1), 1) for i in range(6)]
    for key in keys[:4]:
        mc.insert(key)
    assert mc.avail()["mamba"] == 0
    mc.insert(keys[4])  # the LRU state's leaf goes whole, Full KV included
    assert mc.match(keys[0]).prefix_len == 0
    assert mc.avail()["full"] == mc.totals()["full"] - 4 * P and len(mc.state_nodes()) == 4
    held = [(n, mc.lock(n)) for n in (mc.node_at(k) for k in (keys[1], keys[3], keys[4]))]
    mc.insert(keys[5])  # only keys[2] is unlocked
    assert mc.match(keys[2]).prefix_len == 0
    for k in (keys[1], keys[3], keys[4], keys[5]):
        assert mc.match(k).prefix_len == P
    for node, receipt in held:
        mc.unlock(node, receipt)
    mc.drain()


@pytest.mark.parametrize("cfg", MAMBA_CONFIGS, ids=config_id)
def test_new_request_refused_when_every_state_is_locked_or_held(cfg, monkeypatch):
    """PR #36770 / §8.4: pool N + N*s, N prefix states each locked by a request that
    holds s slots: nothing is evictable, so a new request is refused before anything
    changes, and a bare allocation fails after exactly one eviction attempt."""
    probe = MambaChecked.of(cfg)
    s = probe.slots_per_req
    mc = _pressured(cfg, N + N * s)
    P = mc.ps
    keys = _prefixes(mc)
    for i, key in enumerate(keys):
        req = mc.new_request(key + mc.seq(5000 + 100 * i, 1))
        assert req.cache_protected_len == P
    assert mc.avail()["mamba"] == 0 and mc.cache.protected_size("mamba") == N
    assert mc.cache.evictable_size("mamba") == 0
    snap = mc.cache.snapshot()
    with pytest.raises(PoolExhaustedError, match="mamba"):
        mc.cache.new_request(mc.seq(9000, 2))
    assert _but_its_match(mc.cache.snapshot()) == _but_its_match(snap)
    mc.ok()

    calls = []
    real = mc.cache.evict_for_alloc
    monkeypatch.setattr(mc.cache, "evict_for_alloc", lambda params: calls.append(params) or real(params))
    with pytest.raises(PoolExhaustedError, match="mamba"):
        mc.cache.alloc_mamba_state([])
    assert len(calls) == 1 and calls[0] == EvictParams(mamba_num=1)
    assert _but_its_match(mc.cache.snapshot()) == _but_its_match(snap)
    mc.ok()

    mc.finish(mc.reqs[0], insert=False)  # s slots back, its prefix unlocked
    mc.new_request(mc.seq(9000, 2))
    mc.drain()


@pytest.mark.parametrize("cfg", MAMBA_CONFIGS, ids=config_id)
def test_new_request_refused_when_every_slot_is_held_by_requests(cfg):
    s = MambaChecked.of(cfg).slots_per_req
    mc = _pressured(cfg, 2 * s)
    for i in range(2):
        mc.new_request(mc.seq(5000 + 100 * i, 2))
    assert mc.avail()["mamba"] == 0 and mc.state_nodes() == []
    snap = mc.cache.snapshot()
    with pytest.raises(PoolExhaustedError, match="mamba"):
        mc.cache.new_request(mc.seq(9000, 2))
    assert _but_its_match(mc.cache.snapshot()) == _but_its_match(snap)
    mc.ok()
    mc.finish(mc.reqs[0], insert=False)
    mc.new_request(mc.seq(9000, 2))
    mc.drain()


@pytest.mark.parametrize("cfg", MAMBA_CONFIGS, ids=config_id)
def test_new_request_with_room_keeps_locked_prefixes(cfg):
    """§8.4 pool 3N (here: room for one more request): success, the N prefix states
    stay protected."""
    s = MambaChecked.of(cfg).slots_per_req
    mc = _pressured(cfg, N + N * s + s)
    keys = _prefixes(mc)
    for i, key in enumerate(keys):
        mc.new_request(key + mc.seq(5000 + 100 * i, 1))
    mc.new_request(mc.seq(9000, 2))
    assert mc.avail()["mamba"] == 0 and mc.cache.protected_size("mamba") == N
    assert len(mc.state_nodes()) == N
    mc.drain()


@pytest.mark.parametrize("cfg", MAMBA_CONFIGS, ids=config_id)
def test_new_request_evicts_unlocked_prefixes(cfg):
    """§8.4 pool 2N with unlocked prefixes: the new request's s slots come from
    evicting s prefix states (N - s left)."""
    s = MambaChecked.of(cfg).slots_per_req
    mc = _pressured(cfg, N + N * s)
    keys = _prefixes(mc)
    for i in range(N):
        mc.new_request(mc.seq(5000 + 100 * i, 2))  # matches no prefix
    assert mc.avail()["mamba"] == 0 and mc.cache.evictable_size("mamba") == N
    mc.new_request(mc.seq(9000, 2))
    assert len(mc.state_nodes()) == N - s
    for key in keys[:s]:  # the oldest went first
        assert mc.match(key).prefix_len == 0
    mc.drain()


@pytest.mark.parametrize("cfg", MAMBA_CONFIGS, ids=config_id)
def test_cow_source_is_never_evicted_for_its_own_copy(cfg):
    s = MambaChecked.of(cfg).slots_per_req
    mc = _pressured(cfg, s)
    P = mc.ps
    X = mc.seq(1, 1)
    x = mc.insert(X).last_device_node
    # the only evictable state is the one the request would copy (and lock)
    snap = mc.cache.snapshot()
    with pytest.raises(PoolExhaustedError, match="mamba"):
        mc.cache.new_request(X + mc.seq(500, 1))
    assert _but_its_match(mc.cache.snapshot()) == _but_its_match(snap)
    mc.ok()
    # a request that does not need it may evict it
    mc.new_request(mc.seq(900, 2))
    assert mc.match(X).prefix_len == 0 and x not in mc.cache.tree.nodes
    mc.drain()

    # a bare copy-on-write under pressure evicts another state for its slot
    mc = _pressured(cfg, 2)
    X, Y = mc.seq(1, 1), mc.seq(300, 1)
    x = mc.insert(X).last_device_node
    mc.insert(Y)
    req = Req("r", X, mc.cache.tree._empty, 0, None)
    assert mc.cow_match(X, req).prefix_len == P  # evicts Y's state (the leaf goes whole)
    mc.assert_cow(req, x, X)
    assert mc.state_nodes() == [x]
    mc.cache.free_mamba_state(req.mamba_pool_idx)
    mc.ok()
    mc.drain()

    # ... and when that eviction cannot spare a slot, the match is refused with the
    # source intact and unlocked (upstream asserts "Can not alloc mamba cache")
    mc = _pressured(cfg, 1)
    x = mc.insert(X).last_device_node
    shape = _shape(mc.cache.snapshot())
    req = Req("r2", X, mc.cache.tree._empty, 0, None)
    with pytest.raises(PoolExhaustedError, match="mamba"):
        mc.cache.match_prefix(MatchPrefixParams(RadixKey(X), cow_mamba=True, req=req))
    assert req.mamba_pool_idx is None and mc.has_state(x)
    assert _shape(mc.cache.snapshot()) == shape
    assert mc.cache.protected_size("mamba") == 0
    mc.ok()
    mc.drain()


# ---- FULL+SWA+MAMBA: the cascade across the three components -------------------------


@pytest.fixture(params=HYBRID_CONFIGS, ids=config_id)
def hc(request) -> MambaChecked:
    return MambaChecked.of(request.param)


def test_swa_eviction_of_internal_node_takes_its_state(hc):
    P = hc.ps
    long, s, leaf = hc.short_and_long()[1:]
    r = hc.evict(swa=2 * P)
    assert evicted(r) == (0, 2 * P, 1)
    assert hc.view(s, "swa").tombstone and not hc.has_state(s) and not hc.view(s, "full").tombstone
    assert hc.has_state(leaf) and not hc.view(leaf, "swa").tombstone
    hc.match(long)  # the oracle decides whether the leaf alone covers a window
    hc.drain()


def test_full_leaf_eviction_takes_every_component(hc):
    P = hc.ps
    X = hc.seq(1, 1)
    hc.insert(X)
    r = hc.evict(num_tokens=P)
    assert evicted(r) == (P, P, 1)
    assert hc.avail() == hc.totals() and len(hc.cache.snapshot().nodes) == 1


def test_locked_mamba_below_an_evicting_swa_is_not_dropped(hc):
    """Mamba locked on a node whose SWA is not (a receipt that skipped SWA): SWA
    eviction tombstones the node's SWA, and the cascade refuses to drop the locked
    lower tier (v0.5.23 ``_cascade_evict`` asserts ``lock_ref == 0``)."""
    P = hc.ps
    x = hc.insert(hc.seq(1, 1)).last_device_node
    hc.lock(x, skip=("swa",))
    assert hc.locks(x) == (1, 0, 1)
    with pytest.raises(AssertionError, match="mamba locked"):
        hc.cache.evict(EvictParams(swa_num_tokens=P))
    assert hc.has_state(x) and hc.view(x).lock_ref == 1  # the state was not dropped
    # the eviction was aborted mid-walk (an assert, as upstream): no further checks


def test_early_window_release_drops_the_colocated_mamba_lock(hc):
    """PR #28161: releasing the window part also releases Mamba (ranked below SWA),
    so a later SWA eviction of the still Full-locked node can take its state."""
    P = hc.ps
    X = hc.seq(1, 1)
    x = hc.insert(X).last_device_node
    receipt = hc.lock(x)
    assert hc.locks(x) == (1, 1, 1)
    hc.release_window(x, receipt)
    assert hc.locks(x) == (1, 0, 0)
    assert hc.cache.protected_size("mamba") == 0 and hc.cache.evictable_size("mamba") == 1
    assert not hc.node(x).evictable_leaf
    r = hc.evict(swa=P)
    assert evicted(r) == (0, P, 1)
    assert not hc.view(x, "full").tombstone and not hc.has_state(x)
    hc.unlock(x, receipt)
    assert hc.locks(x) == (0, 0, 0)
    hc.drain()


def test_early_release_preserves_an_owners_skipped_mamba_lock(hc):
    x = hc.insert(hc.seq(1, 1)).last_device_node
    owner = hc.lock(x)
    second = hc.lock(x, skip=("mamba",))
    assert hc.locks(x) == (2, 2, 1)
    hc.release_window(x, second)  # Mamba was never taken by this receipt
    assert hc.locks(x) == (2, 1, 1)
    hc.unlock(x, second)
    assert hc.locks(x) == (1, 1, 1)
    hc.unlock(x, owner)
    assert hc.locks(x) == (0, 0, 0)
    hc.drain()


def test_leaf_transition_swa_evict_spares_locked_full(hc):
    P, W = hc.ps, hc.sw
    n_short = W // P + 4
    seq_a = hc.seq(1, n_short)
    seq_ab = seq_a + hc.seq(5000, 2)
    hc.insert(seq_a)
    hc.insert(seq_ab)
    a = hc.node_at(seq_a)
    receipt = hc.lock(a)
    hc.release_window(a, receipt)
    assert hc.view(a, "swa").lock_ref == 0 and hc.view(a).lock_ref == 0
    assert hc.view(a, "full").lock_ref >= 1
    assert a in hc.cache.snapshot().lru["swa"]
    r = hc.evict(num_tokens=len(seq_ab))
    assert r.num_tokens_evicted == 2 * P  # only the unlocked branch below A
    assert not hc.node(a).children and not hc.node(a).evictable_leaf  # a locked leaf
    assert a in hc.cache.snapshot().lru["swa"]
    r = hc.evict(swa=len(seq_a))
    assert r.num_tokens_evicted == 0 and r.mamba_num_evicted == 1
    assert not hc.view(a, "full").tombstone  # the locked Full KV survives
    assert hc.view(a, "swa").tombstone and not hc.has_state(a)
    hc.unlock(a, receipt)
    hc.drain()


# ---- a protected prefix past the tracked checkpoint (extra buffer) -------------------


def _off_grid_prefix_request() -> tuple[MambaChecked, list[int], Req]:
    """Page 4, G 64: a cached state at 72 tokens (a direct insert, off the grid); a
    request matching it has ``cache_protected_len`` 72 but tracks its checkpoint at 64,
    so caching it inserts a 64-token key below its protected prefix."""
    mc = MambaChecked(4, None, 256, 60)
    X = mc.seq(1, 18)
    mc.insert(X)
    req = mc.new_request(X + mc.seq(900, 2))
    assert (req.cache_protected_len, req.mamba_last_track_seqlen, req.kv_len) == (72, 64, 80)
    return mc, X, req


def test_finished_request_with_protected_prefix_past_its_checkpoint():
    """SGLang 0.5.23 asserts here (its checkpoint would end at 64, below the 72 the
    request protects; checked against it through the bridge): ours refuses the
    release with nothing changed, and the request can still be dropped uncached."""
    mc, X, req = _off_grid_prefix_request()
    before = mc.cache.snapshot()
    with pytest.raises(ReferenceAssertsError, match="SGLang asserts here.*64 tokens, below the 72"):
        mc.cache.release_kv_cache(req)
    after = mc.cache.snapshot()
    assert (after.nodes, after.pools, after.requests) == (before.nodes, before.pools, before.requests)
    assert req.kv_len == 80 and req.lock is not None
    mc.cache.release_kv_cache(req, checkpoint=False)
    assert check_invariants(mc.cache) == []
    assert mc.avail()["full"] == mc.totals()["full"] - 72  # only the tree's 72 tokens stay
    assert mc.match(X).prefix_len == 72


def test_unfinished_request_with_protected_prefix_past_its_checkpoint():
    mc, X, req = _off_grid_prefix_request()
    with pytest.raises(ReferenceAssertsError):  # as 0.5.23 asserts, but with nothing changed
        mc.cache.checkpoint(req)
    assert req.kv_len == 80 and req.cache_protected_len == 72
    assert check_invariants(mc.cache) == []


# ---- admission check on a prompt that diverges inside a node with a state -----------


def _diverging_inside_a_state(cfg, **sizes) -> tuple[MambaChecked, list[int], int, int]:
    """X (4 pages) cached, then X[:3P] (a 3-page node ``u`` with a state, its child the
    leaf with X's state). A prompt X[:2P] + 3 stray pages diverges inside ``u``: the
    match splits ``u`` and its new 2-page parent has no state, so nothing matches."""
    mc = MambaChecked.of(cfg, **sizes)
    P = mc.ps
    X = mc.seq(1, 4)
    mc.insert(X)
    mc.insert(X[: 3 * P])
    u, leaf = mc.node_at(X[: 3 * P]), mc.node_at(X)
    assert mc.has_state(u) and mc.node(u).tokens == 3 * P
    return mc, X, u, leaf


@pytest.mark.parametrize("cfg", MAMBA_CONFIGS, ids=config_id)
def test_refused_request_diverging_inside_a_state_keeps_only_its_match(cfg):
    """SGLang's scheduler matches before it admits: a refused admission keeps the
    match's split of ``u`` (checked against SGLang through the bridge) and holds
    nothing: no slot, no lock, the pools as they were."""
    P = cfg[0]
    mc, X, u, leaf = _diverging_inside_a_state(cfg, kv_size=7 * P)
    mc.lock(leaf)  # nothing evictable; 3 pages of KV free
    assert mc.avail()["full"] == 3 * P and mc.cache.full_evictable_size() == 0
    prompt = X[: 2 * P] + mc.seq(900, 3)  # matches nothing, so needs 5 pages
    snap = mc.cache.snapshot()
    with pytest.raises(PoolExhaustedError, match="full"):
        mc.cache.new_request(prompt)
    after = mc.cache.snapshot()
    assert (after.pools, after.requests) == (snap.pools, snap.requests)
    assert len(after.nodes) == len(snap.nodes) + 1  # u split at 2 pages: the match's only change
    assert mc.node(mc.node_at(X[: 2 * P])).tokens == 2 * P
    mc.ok()


@pytest.mark.parametrize("cfg", MAMBA_CONFIGS, ids=config_id)
def test_request_diverging_inside_a_state_may_evict_it(cfg):
    s = MambaChecked.of(cfg).slots_per_req
    mc, X, u, leaf = _diverging_inside_a_state(cfg, mamba_size=1 + s)
    mc.lock(leaf)  # X's state protected; u's is the only evictable one
    assert mc.avail()["mamba"] == s - 1 and mc.cache.evictable_size("mamba") == 1
    req = mc.new_request(X[: 2 * mc.ps] + mc.seq(900, 3))
    assert req.cache_protected_len == 0 and req.mamba_cow_src is None
    assert mc.avail()["mamba"] == 0 and mc.state_nodes() == [leaf]
