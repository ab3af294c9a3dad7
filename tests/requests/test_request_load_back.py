"""Admission with load-back (cache/requests/load_back.py): new_request(load_back=True)
matches, loads the host part of the prefix through v0.5.23's load_back(node, quota,
req), anchors at what it loaded and allocates the rest; a called-off load gives back
the Mamba slot it prepared for the request (sgl-project/sglang#30986)."""

from __future__ import annotations

import pytest

from cache import UnifiedRadixCache
from cache.basics.errors import CacheError, PoolExhaustedError
from cache.checks.invariants import check_invariants
from cache.basics.params import EvictParams, MatchPrefixParams
from cache.pools.kv_buffer import prefix_fingerprints
from cache.basics.keys import RadixKey

HOST = {"write_policy": "write_back", "load_back_threshold": 1}


def _cache(components=("full", "mamba"), page_size=1, **sizes) -> UnifiedRadixCache:
    """[1..6] cached over [1..3], then [4..6] demoted to the host (its state too)."""
    cfg = dict(kv_size=32, mamba_size=4) if "mamba" in components else dict(kv_size=32)
    cfg.update(sizes)
    cache = UnifiedRadixCache(components=components, page_size=page_size, hicache=HOST, **cfg)
    for prompt in ([1, 2, 3, 4][: 3 if page_size == 1 else 4], list(range(1, 9 if page_size > 1 else 7))):
        cache.release_kv_cache(cache.new_request(prompt))
    cache.evict(EvictParams(num_tokens=4 if page_size > 1 else 3))
    return cache


def _mamba_counts(cache) -> tuple[int, int, int, int]:
    view = cache.snapshot().pools["mamba"]
    return view.available, view.evictable, view.protected, view.held


def _no_violations(cache) -> None:
    assert check_invariants(cache) == []


def test_the_setup_leaves_a_host_only_state_below_a_device_prefix():
    cache = _cache()
    match = cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 5, 6, 7])))
    assert (match.prefix_len, match.host_hit_length, match.mamba_host_hit_length) == (3, 3, 1)


def test_a_load_anchors_the_request_at_the_best_match_with_its_own_copy_of_the_state():
    cache = _cache()
    best = cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 5, 6, 7]))).best_match_node
    req = cache.new_request([1, 2, 3, 4, 5, 6, 7], rid="r", load_back=True)
    assert (req.host_loaded_length, req.cache_protected_len, req.last_node) == (3, 6, best)
    node = cache.tree.nodes[best]
    mamba = cache.by_name["mamba"]
    assert node.data[0].value is not None and node.data[mamba.index].value is not None  # back on the device
    assert node.data[0].lock_ref == 1  # the request's lock, on the loaded node
    # its running state: the copy of [1..6]'s state, advanced by the one token it computed
    want = int(prefix_fingerprints([1, 2, 3, 4, 5, 6, 7])[-1])
    assert mamba.pool.fingerprint_of(req.mamba_pool_idx) == want
    assert int(req.mamba_pool_idx[0]) != int(node.data[mamba.index].value[0])
    assert req.kv_len == 7 and req.own_indices.shape[0] == 1
    _no_violations(cache)


def test_a_load_called_off_by_the_quota_gives_the_prepared_slot_back():
    cache = _cache()
    before = _mamba_counts(cache)
    req = cache.new_request([1, 2, 3, 4, 5, 6, 7], rid="r", load_back=True, mem_quota=1)
    assert (req.host_loaded_length, req.cache_protected_len) == (0, 3)  # the device prefix only
    available, evictable, protected, held = _mamba_counts(cache)
    assert held == 1 and available == before[0] - 1  # only the running slot admission gives it
    assert cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 5, 6]))).host_hit_length == 3  # still on the host
    _no_violations(cache)
    cache.release_kv_cache(req, checkpoint=False)
    assert _mamba_counts(cache) == before


def test_a_load_needs_no_quota_check_when_nothing_is_on_the_host():
    cache = _cache()
    req = cache.new_request([1, 2, 3, 9], rid="r", load_back=True, mem_quota=0)
    assert (req.host_loaded_length, req.cache_protected_len) == (0, 3)
    _no_violations(cache)


def test_a_refused_admission_after_a_called_off_load_leaks_no_slot():
    cache = _cache(kv_size=12)
    before = _mamba_counts(cache)
    full_before = cache.available_size("full")
    with pytest.raises(PoolExhaustedError):
        cache.new_request([1, 2, 3, 4, 5, 6] + [7] * 20, rid="r", load_back=True, mem_quota=1)
    assert _mamba_counts(cache) == before and cache.available_size("full") == full_before
    assert "r" not in cache.requests
    _no_violations(cache)


def test_load_back_needs_the_host_tier_and_a_sane_quota():
    plain = UnifiedRadixCache(components=("full",), kv_size=16)
    with pytest.raises(CacheError, match="host tier"):
        plain.new_request([1, 2], load_back=True)
    cache = _cache()
    with pytest.raises(CacheError, match="mem_quota"):
        cache.new_request([1, 2, 3], load_back=True, mem_quota=-1)
    assert cache.requests == {}


def test_page_four_load_reserves_the_ping_pong_slots_after_the_load():
    """Extra buffer: states sit on the 64-token grid; the loaded request's running
    slot is prepared for the load, its two ping-pong slots come with admission."""
    cache = UnifiedRadixCache(components=("full", "mamba"), page_size=4, kv_size=256, mamba_size=8, hicache=HOST)
    for prompt in (list(range(1, 65)), list(range(1, 129))):
        cache.release_kv_cache(cache.new_request(prompt))
    cache.evict(EvictParams(num_tokens=64))
    req = cache.new_request(list(range(1, 140)), rid="r", load_back=True)
    assert (req.host_loaded_length, req.cache_protected_len) == (64, 128)
    assert req.mamba_ping_pong is not None and len(cache.by_name["mamba"].held_slots(req)) == 3
    _no_violations(cache)


def test_full_only_admission_loads_the_host_path():
    cache = _cache(components=("full",))
    req = cache.new_request([1, 2, 3, 4, 5, 6, 7], rid="r", load_back=True)
    assert (req.host_loaded_length, req.cache_protected_len) == (3, 6)
    cache.release_kv_cache(req)
    _no_violations(cache)


def test_a_running_request_started_from_a_stale_state_is_flagged():
    """The check the #30986 fault trips: the state a request runs from is its own."""
    cache = _cache()
    req = cache.new_request([1, 2, 3, 9], rid="r")
    mamba = cache.by_name["mamba"]
    mamba.pool.write(req.mamba_pool_idx, 12345)
    assert "mamba.request_state" in {v.name for v in check_invariants(cache)}
