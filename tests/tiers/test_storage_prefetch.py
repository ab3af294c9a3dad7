"""Prefetch from the storage tier (cache/tiers/prefetch.py, SGLang 0.5.23's L3 -> L2
path): the issue (anchor, threshold, rate limit), the stages a flush moves a prefetch
through, the stop policies at the admission poll, a partial or delayed read, the
anchor's host lock, and the completion's host-only node, checked with the invariants
after every call and the loaded slots verified by fingerprint. A prefetch's key is a
request's input: the span asked ends at its prefix limit, one token short (A + [7]
asks for A)."""

from __future__ import annotations

import pytest

from cache import EvictParams, InsertParams, RadixKey, UnifiedRadixCache, check_invariants, verify_match
from cache.basics.errors import CacheError
from cache.tiers.backends import StorageInjector

A, B = list(range(1, 17)), list(range(101, 117))


def make(policy="best_effort", transfers="immediate", threshold=8, write="write_through", inject=(), **storage):
    return UnifiedRadixCache(components=["full"], kv_size=64, page_size=4, device="cpu", hicache={
        "write_policy": write, "transfers": transfers, "load_back_threshold": 4,
        "storage": {"backend": "memory", "prefetch_policy": policy, "prefetch_threshold": threshold,
                    "inject": list(inject), **storage}})


def checked(cache):
    assert check_invariants(cache) == []
    return cache


def stored_then_forgotten(cache, *keys):
    """Insert each key (its pages reach storage), then evict it from both tiers."""
    for tokens in keys:
        slots = cache.alloc_kv(len(tokens))
        cache.write_kv(slots, tokens)
        cache.insert(InsertParams(RadixKey(tokens), slots))
    for _ in range(3):  # held: the backup's ack, then the store's
        cache.check_hicache_events()
    cache.evict(EvictParams(num_tokens=64))
    cache.evict_host(64)
    assert len(cache.tree.nodes) == 1 and checked(cache)


def test_an_immediate_prefetch_lands_host_only_and_loads_back_verified():
    cache = make()
    stored_then_forgotten(cache, A)
    assert cache.query_storage_hit_length(RadixKey(A + [7])) == 16
    issue = cache.prefetch_from_storage("r1", RadixKey(A + [7]))  # the partial page is not asked for
    assert (issue.issued, issue.tokens) == (True, 16) and checked(cache)
    assert cache.check_prefetch_progress("r1") and cache.pop_prefetch_loaded_tokens("r1") == 16
    assert cache.pop_prefetch_loaded_tokens("r1") == 0  # once
    match = cache.match_prefix(RadixKey(A))
    assert (match.device_prefix_len, match.host_hit_length) == (0, 16)
    assert cache.load_back(RadixKey(A)).loaded == 16 and checked(cache)
    match = cache.match_prefix(RadixKey(A))
    assert match.device_prefix_len == 16 and verify_match(cache, RadixKey(A), match) == []
    metrics = cache.snapshot().metrics
    assert (metrics["storage_hit_tokens"], metrics["prefetched_tokens"]) == (16, 16)


def test_a_prefetch_is_anchored_at_the_last_host_node_and_host_locks_it():
    cache = make(transfers="held")
    stored_then_forgotten(cache, A + B)
    slots = cache.alloc_kv(16)
    cache.write_kv(slots, A)
    cache.insert(InsertParams(RadixKey(A), slots))
    cache.check_hicache_events()  # A's backup acknowledged: A is the last host node of A + B
    cache.check_hicache_events()
    anchor = next(iter(cache.tree.root.children.values()))
    assert cache.prefetch_from_storage("r1", RadixKey(A + B + [7])).tokens == 16
    assert anchor.data[0].host_lock_ref == 1 and checked(cache)
    cache.evict(EvictParams(num_tokens=16))  # demoted: host-only and host-locked, host eviction cannot take it
    assert cache.evict_host(16) == 0 and anchor.id in cache.tree.nodes
    cache.check_hicache_events()  # the prefetch runs through: B hangs below A
    assert anchor.data[0].host_lock_ref == 0 and checked(cache)
    assert cache.match_prefix(RadixKey(A + B)).host_hit_length == 32


def test_best_effort_before_the_first_flush_revokes_with_nothing_and_leaks_nothing():
    cache = make(transfers="held")
    stored_then_forgotten(cache, A)
    free = cache.host_available_size()
    assert cache.prefetch_from_storage("r1", RadixKey(A + [7])).issued
    assert cache.check_prefetch_progress("r1") and cache.pop_prefetch_loaded_tokens("r1") == 0
    assert cache.host_available_size() == free and cache.host.storage.prefetch.occupied == 0 and checked(cache)


def test_wait_complete_waits_for_the_flush():
    cache = make("wait_complete", transfers="held")
    stored_then_forgotten(cache, A)
    cache.prefetch_from_storage("r1", RadixKey(A + [7]))
    assert not cache.check_prefetch_progress("r1") and not cache.check_prefetch_progress("r1")
    cache.check_hicache_events()
    assert cache.check_prefetch_progress("r1") and cache.pop_prefetch_loaded_tokens("r1") == 16 and checked(cache)


def test_timeout_counts_flushes_from_the_first_unfinished_poll():
    cache = make("timeout", transfers="held", prefetch_timeout_base=1,
                 inject=[{"call": "exists", "outcome": "delay", "steps": 5}])
    stored_then_forgotten(cache, A)
    cache.prefetch_from_storage("r1", RadixKey(A + [7]))
    assert not cache.check_prefetch_progress("r1")  # the clock starts here
    cache.check_hicache_events()  # the query waits (1 of 5)
    assert not cache.check_prefetch_progress("r1")  # 1 flush waited: within the base of 1
    cache.check_hicache_events()
    assert cache.check_prefetch_progress("r1")  # 2 > 1: cut at its deadline, nothing had arrived
    assert cache.pop_prefetch_loaded_tokens("r1") == 0 and len(cache.tree.nodes) == 1 and checked(cache)


def test_a_read_that_fails_midway_keeps_the_pages_before_it():
    cache = make(inject=[{"call": "get", "outcome": "fail", "nth_page": 3}])
    stored_then_forgotten(cache, A)
    cache.prefetch_from_storage("r1", RadixKey(A + [7]))
    assert cache.check_prefetch_progress("r1") and cache.pop_prefetch_loaded_tokens("r1") == 8
    assert cache.match_prefix(RadixKey(A)).host_hit_length == 8 and checked(cache)


def test_a_delayed_read_holds_its_host_slots_until_the_flushes_pass():
    cache = make(transfers="held", inject=[{"call": "get", "outcome": "delay", "steps": 2}])
    stored_then_forgotten(cache, A)
    cache.prefetch_from_storage("r1", RadixKey(A + [7]))
    cache.check_hicache_events()  # query and host slots; the read waits
    prefetch = cache.host.storage.prefetch.ongoing["r1"]
    assert prefetch.rows is not None and not prefetch.read and checked(cache)
    cache.check_hicache_events()
    assert "r1" in cache.host.storage.prefetch.ongoing
    cache.check_hicache_events()
    assert "r1" not in cache.host.storage.prefetch.ongoing and cache.pop_prefetch_loaded_tokens("r1") == 16
    assert checked(cache)


@pytest.mark.parametrize("threshold, key, reason", [
    (8, A[:5], "too_short"),  # a one-page span under an 8-token threshold
    (8, [], "nothing_to_fetch"),
])
def test_short_spans_are_declined(threshold, key, reason):
    cache = make(threshold=threshold)
    issue = cache.prefetch_from_storage("r1", RadixKey(key))
    assert (issue.issued, issue.reason) == (False, reason) and cache.check_prefetch_progress("r1")


def test_a_hit_below_the_threshold_is_revoked_and_a_full_budget_declines():
    cache = make(transfers="held", threshold=8)
    stored_then_forgotten(cache, A[:4])  # storage holds one page of A
    cache.prefetch_from_storage("r1", RadixKey(A + [7]))
    cache.check_hicache_events()
    assert cache.host.storage.prefetch.outcomes["revoked_insufficient"] == 1 and checked(cache)
    prefetch = cache.host.storage.prefetch
    prefetch.occupied = prefetch.capacity_limit  # as if half the host pool were being fetched
    assert cache.prefetch_from_storage("r2", RadixKey(B + [7])).reason == "rate_limited"
    prefetch.occupied = 0


def test_prefetch_needs_a_storage_tier_and_a_request_id():
    with pytest.raises(CacheError, match="needs the storage tier"):
        UnifiedRadixCache(kv_size=16, device="cpu", hicache={}).prefetch_from_storage("r1", RadixKey(A + [7]))
    with pytest.raises(CacheError, match="request id"):
        make().prefetch_from_storage("", RadixKey(A))


def test_an_injector_wraps_the_backend_from_the_config():
    cache = make(inject=[{"call": "set", "outcome": "fail", "nth_page": 2}])
    assert isinstance(cache.host.storage.backend, StorageInjector)
    slots = cache.alloc_kv(16)
    cache.write_kv(slots, A)
    cache.insert(InsertParams(RadixKey(A), slots))  # the store's one batch fails at its 2nd page
    metrics = cache.snapshot().metrics
    assert (metrics["stored_pages_total"], metrics["store_failed_pages_total"]) == (3, 1)


def test_a_split_anchor_releases_both_parts_at_the_end():
    cache = make(transfers="held")
    stored_then_forgotten(cache, A + B)
    slots = cache.alloc_kv(16)
    cache.write_kv(slots, A)
    cache.insert(InsertParams(RadixKey(A), slots))
    cache.check_hicache_events()  # the backup's ack (its store queued) ...
    cache.check_hicache_events()  # ... and the store's: no other host lock on A
    anchor = next(iter(cache.tree.root.children.values()))
    cache.prefetch_from_storage("r1", RadixKey(A + B + [7]))
    cache.match_prefix(RadixKey(A[:8] + [99]))  # splits the anchor: the upper part takes its host lock too
    upper = anchor.parent
    assert upper is not cache.tree.root and upper.data[0].host_lock_ref == 1 and checked(cache)
    assert cache.snapshot().node(upper.id).components["full"].extras["prefetching"] == 1
    cache.check_hicache_events()
    assert (upper.data[0].host_lock_ref, anchor.data[0].host_lock_ref) == (0, 0) and checked(cache)
    assert cache.pop_prefetch_loaded_tokens("r1") == 16


def test_the_span_ends_at_the_prefix_limit_one_token_short_of_the_input():
    """sgl-project/sglang#27291: a 16-token input may reuse 15, so a prefetch asks for
    12 (whole pages); one token more and it asks for all 16."""
    cache = make()
    stored_then_forgotten(cache, A)
    assert cache.prefetch_from_storage("r1", RadixKey(A)).tokens == 12
    assert cache.check_prefetch_progress("r1") and cache.pop_prefetch_loaded_tokens("r1") == 12
    assert cache.prefetch_from_storage("r2", RadixKey(A + [7])).tokens == 4  # the 4 after the 12 on the host
    assert checked(cache)


def test_one_flush_takes_host_slots_for_every_hit_before_any_completes():
    """Two prefetches in one flush, host room for one and a half: the second's host
    eviction finds the first's slots taken, not yet a node it could evict, so it takes
    the page that is free (v0.5.23's poll allocates every hit before the acks complete)."""
    cache = UnifiedRadixCache(components=["full"], kv_size=32, page_size=4, device="cpu", hicache={
        "write_policy": "write_through", "transfers": "held", "host_kv_size": 20, "load_back_threshold": 4,
        "storage": {"backend": "memory", "prefetch_threshold": 4}})
    stored_then_forgotten(cache, A[:8], B[:8])
    slots = cache.alloc_kv(8)
    cache.write_kv(slots, B[8:])
    cache.insert(InsertParams(RadixKey(B[8:]), slots))  # on the device and the host: 8 slots no host eviction takes
    cache.check_hicache_events()
    assert cache.prefetch_from_storage("r1", RadixKey(A[:8] + [7])).issued
    assert cache.prefetch_from_storage("r2", RadixKey(B[:8] + [7])).issued
    cache.check_hicache_events()
    assert [cache.pop_prefetch_loaded_tokens(rid) for rid in ("r1", "r2")] == [8, 4] and checked(cache)
    assert cache.host.kv.allocator.available_size() == 0
    assert cache.match_prefix(RadixKey(A[:8])).host_hit_length == 8  # the first's node stayed


def test_a_fetched_node_that_gets_a_fetched_child_is_a_host_leaf_no_more():
    """Two prefetches anchored at the root complete at one flush: the second hangs its
    pages below the first's host-only node, which host eviction may then not take alone."""
    cache = make(transfers="held")
    stored_then_forgotten(cache, A + B)
    cache.prefetch_from_storage("r1", RadixKey(A + [7]))
    cache.prefetch_from_storage("r2", RadixKey(A + B + [7]))
    cache.check_hicache_events()
    assert [cache.pop_prefetch_loaded_tokens(rid) for rid in ("r1", "r2")] == [16, 16] and checked(cache)
    first = cache.tree.node_by_id(cache.match_prefix(RadixKey(A)).last_host_node)
    assert first.children and first not in cache.tree.host_leaves


def test_a_completion_that_walks_existing_nodes_reports_them_touched():
    """The walk refreshes access times along its path: a checker's per-step view (and the
    timeline built on it) must hear of it even when the walk adds nothing."""
    cache = make(transfers="held", inject=[{"call": "exists", "outcome": "delay", "steps": 1, "times": 1}])
    stored_then_forgotten(cache, A)
    cache.prefetch_from_storage("r1", RadixKey(A + [7]))  # its hit query waits one flush
    cache.prefetch_from_storage("r2", RadixKey(A + [7]))
    cache.check_hicache_events()  # r2 places A
    node = cache.tree.node_by_id(cache.match_prefix(RadixKey(A)).last_host_node)
    before = node.last_access_time
    cache.tree.take_touched()  # recording starts
    cache.check_hicache_events()  # r1 walks A: nothing new
    assert [cache.pop_prefetch_loaded_tokens(rid) for rid in ("r1", "r2")] == [0, 16] and checked(cache)
    assert node.last_access_time > before and node.id in cache.tree.take_touched()
