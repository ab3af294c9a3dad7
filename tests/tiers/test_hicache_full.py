"""The host tier (HiCache) for Full KV: backups under each write policy, demotion to
host-only on device eviction, host hits, load-back, host eviction, inserts over
host-only nodes, and the invariants that watch it all. Literal expectations marked
"oracle" come from SGLang 0.5.23's real host tier on the CPU
(../shared/oracle/hicache_oracle.py, examples-hicache/pressure2.jsonl and
wb_pressure.jsonl)."""

from __future__ import annotations

import pytest
import torch

from hicache_util import insert

from cache import EvictParams, RadixKey, UnifiedRadixCache, check_invariants, verify_match
from cache.basics.errors import CacheError


def make(policy="write_through", kv_size=64, page_size=1, **host) -> UnifiedRadixCache:
    return UnifiedRadixCache(kv_size=kv_size, page_size=page_size, device="cpu",
                             hicache={"write_policy": policy, **host})


def node_of(cache, first_token):
    return next(n for n in cache.tree.nodes.values() if n is not cache.tree.root and n.token_ids[0] == first_token)


def states(cache) -> list[tuple]:
    """(first token, length, device length or None, host length or None) per node."""
    out = []
    for n in cache.tree.nodes.values():
        if n is not cache.tree.root:
            d = n.data[0]
            out.append((n.token_ids[0], n.length, None if d.value is None else d.value.shape[0],
                        None if d.host_value is None else d.host_value.shape[0]))
    return sorted(out)


A, B, C = list(range(1, 17)), list(range(21, 37)), list(range(41, 57))


def test_write_through_backs_up_a_new_leaf_with_the_device_fingerprints():
    cache = make()
    insert(cache, A)
    node = node_of(cache, 1)
    assert cache.host.kv.size == 129  # SGLang's size for hicache_ratio 2: twice the device, plus a page
    assert cache.tree.backed_up(node) and cache.host_available_size() == 129 - 16
    assert torch.equal(cache.host.kv.buffer.data[node.data[0].host_value], cache.kv_buffer.data[node.data[0].value])


def test_a_chunked_prefill_checkpoint_backs_up_like_any_insert():
    """v0.5.23's checkpoint inserts with no "chunked" mark, so under write-through the
    chunk it caches gets its host copy at once (ours used to carry a flag that could
    suppress it; oracle: the same five steps agree with SGLang through the bridge)."""
    cache = make()
    req = cache.new_request(A[:8])
    cache.checkpoint(req)
    node = node_of(cache, 1)
    assert cache.tree.backed_up(node) and cache.host_available_size() == 129 - 8
    assert req.last_node == node.id and check_invariants(cache) == []


def test_write_through_selective_waits_for_the_second_hit_and_write_back_for_eviction():
    cache = make("write_through_selective")
    insert(cache, A)
    assert not cache.tree.backed_up(node_of(cache, 1))
    insert(cache, A)  # the second hit
    assert cache.tree.backed_up(node_of(cache, 1))
    lazy = make("write_back")
    insert(lazy, A), insert(lazy, A)
    assert not lazy.tree.backed_up(node_of(lazy, 1))


def test_device_eviction_demotes_a_backed_up_leaf_and_a_match_reports_the_host_hit():
    cache = make()
    insert(cache, A)
    node = node_of(cache, 1)
    assert cache.evict(EvictParams(num_tokens=16)).num_tokens_evicted == 16
    assert node.data[0].value is None and node in cache.tree.host_leaves and node not in cache.tree.leaves
    assert cache.available_size() == 64 and cache.evictable_size() == 0
    m = cache.match_prefix(RadixKey(A))
    assert (m.prefix_len, m.host_hit_length, m.full_kv_hit_length) == (0, 16, 16)
    assert m.last_device_node == cache.tree.root.id and m.best_match_node == m.last_host_node == node.id
    assert check_invariants(cache) == []


def test_load_back_brings_the_host_part_to_fresh_device_slots_that_verify():
    cache = make(load_back_threshold=0)
    insert(cache, A)
    cache.evict(EvictParams(num_tokens=16))
    result = cache.load_back(RadixKey(A))
    assert (result.loaded, result.host_hit_length) == (16, 16)
    m = cache.match_prefix(RadixKey(A))
    assert (m.prefix_len, m.host_hit_length) == (16, 0) and verify_match(cache, A, m) == []
    assert cache.tree.backed_up(node_of(cache, 1))  # the host copy stays
    assert check_invariants(cache) == []


def test_oracle_pressure_sequence_under_write_through():
    """examples-hicache/pressure2.jsonl: device 64, host 32, write-through."""
    cache = make(host_kv_size=32)
    insert(cache, A), insert(cache, B)
    assert cache.host_available_size() == 0  # oracle reports 1: its host pool keeps a padding slot
    assert cache.evict(EvictParams(num_tokens=32)).num_tokens_evicted == 32  # oracle: full 32
    assert cache.match_prefix(RadixKey(A)).host_hit_length == 16  # oracle: host_hit 16, device 0
    insert(cache, C)  # its backup evicts the least recent host leaf: B (A was just matched)
    assert cache.match_prefix(RadixKey(A)).host_hit_length == 16  # oracle
    mb = cache.match_prefix(RadixKey(B))
    assert (mb.host_hit_length, mb.full_kv_hit_length) == (0, 0)  # oracle: B is gone
    assert states(cache) == [(1, 16, None, 16), (41, 16, 16, 16)]  # oracle host_dump
    below = cache.load_back(RadixKey(A[:8]))
    assert (below.host_hit_length, below.loaded) == (8, 0) and cache.available_size() == 48  # oracle: threshold 10
    assert states(cache) == [(1, 8, None, 8), (9, 8, None, 8), (41, 16, 16, 16)]  # oracle: the match split A
    loaded = cache.load_back(RadixKey(A))
    assert (loaded.host_hit_length, loaded.loaded, cache.available_size()) == (16, 16, 32)  # oracle
    assert states(cache) == [(1, 8, 8, 8), (9, 8, 8, 8), (41, 16, 16, 16)]  # oracle
    assert cache.evict(EvictParams(num_tokens=64)).num_tokens_evicted == 32  # oracle: full 32
    assert states(cache) == [(1, 8, None, 8), (9, 8, None, 8), (41, 16, None, 16)]  # oracle
    assert len(cache.tree.host_leaves) == 2 and check_invariants(cache) == []  # oracle: host_leaves 2


def test_oracle_pressure_sequence_under_write_back():
    """examples-hicache/wb_pressure.jsonl: device 64, host 32, write-back."""
    cache = make("write_back", host_kv_size=32)
    insert(cache, A), insert(cache, B), insert(cache, C)
    assert states(cache) == [(1, 16, 16, None), (21, 16, 16, None), (41, 16, 16, None)]  # oracle
    assert cache.evict(EvictParams(num_tokens=16)).num_tokens_evicted == 16  # oracle
    assert states(cache) == [(1, 16, None, 16), (21, 16, 16, None), (41, 16, 16, None)]  # oracle
    assert cache.evict(EvictParams(num_tokens=48)).num_tokens_evicted == 32  # oracle: full 32
    assert states(cache) == [(21, 16, None, 16), (41, 16, None, 16)]  # oracle: A's copy made room for C's
    m = cache.match_prefix(RadixKey(C))
    assert (m.prefix_len, m.host_hit_length) == (0, 16)  # oracle
    assert check_invariants(cache) == []


def test_write_back_drops_a_leaf_the_host_cannot_take():
    cache = make("write_back", host_kv_size=8)
    insert(cache, A)
    assert cache.evict(EvictParams(num_tokens=16)).num_tokens_evicted == 16
    assert states(cache) == [] and cache.host_available_size() == 8 and check_invariants(cache) == []


def test_a_partial_match_splits_a_host_only_node_keeping_its_copy_on_both_parts():
    """The spec's partial_match_splits_evicted_backed_up_node (page 4)."""
    cache = make(page_size=4, kv_size=64)
    insert(cache, list(range(1, 17)))  # 4 pages
    cache.evict(EvictParams(num_tokens=16))
    m = cache.match_prefix(RadixKey(list(range(1, 9)) + [99, 98, 97, 96]))
    upper = cache.tree.node_by_id(m.last_host_node)
    assert (m.prefix_len, m.host_hit_length, m.last_device_node) == (0, 8, cache.tree.root.id)
    assert upper.length == 8 and upper.data[0].value is None and upper.data[0].host_value.shape[0] == 8
    (lower,) = upper.children.values()
    assert lower.data[0].value is None and lower.data[0].host_value.shape[0] == 8 and lower in cache.tree.host_leaves
    assert check_invariants(cache) == []


def test_the_host_match_keeps_the_device_anchor():
    """The spec's host-best-match case: a chain of three one-page nodes whose leaf was
    backed up and evicted: best = leaf, device up to its parent, host hit = the leaf."""
    cache = make(kv_size=16)
    insert(cache, [1]), insert(cache, [1, 2]), insert(cache, [1, 2, 3])
    cache.evict(EvictParams(num_tokens=1))
    leaf = node_of(cache, 3)
    m = cache.match_prefix(RadixKey([1, 2, 3]))
    assert (m.best_match_node, m.last_device_node, m.prefix_len, m.host_hit_length) == (
        leaf.id, node_of(cache, 2).id, 2, 1)


def test_an_insert_over_a_host_only_node_brings_it_back_without_freeing_duplicates():
    cache = make()
    insert(cache, A)
    cache.evict(EvictParams(num_tokens=16))
    free_before = cache.available_size()
    result = insert(cache, A + [77, 78])
    assert result.prefix_len == 16
    node = node_of(cache, 1)
    assert node.data[0].value is not None and node not in cache.tree.host_leaves
    assert cache.available_size() == free_before - 18  # all 18 incoming slots stay in the tree
    assert verify_match(cache, A, cache.match_prefix(RadixKey(A))) == []


def test_host_eviction_takes_least_recent_host_leaves_and_then_their_host_only_parents():
    cache = make()
    insert(cache, A), insert(cache, A + [90, 91, 92, 93])
    cache.evict(EvictParams(num_tokens=64))
    assert states(cache) == [(1, 16, None, 16), (90, 4, None, 4)]
    assert cache.evict_host(1) == 4 and states(cache) == [(1, 16, None, 16)]  # the leaf first
    assert cache.evict_host(100) == 16 and states(cache) == [] and cache.host_available_size() == 129
    assert check_invariants(cache) == []


def test_load_back_refused_when_the_device_cannot_cover_it_changes_no_host_data():
    """v0.5.23's load_back returns False (nothing loaded) when eviction cannot make room."""
    cache = make(kv_size=16, load_back_threshold=0)
    insert(cache, A)
    cache.evict(EvictParams(num_tokens=16))
    hold = cache.alloc_kv(8)  # a running request holds half the device pool
    assert cache.load_back(RadixKey(A)).loaded == 0
    assert states(cache) == [(1, 16, None, 16)] and cache.available_size() == 8
    cache.free_kv([hold])  # (held outside any request, the checker would call it a leak)
    assert check_invariants(cache) == []
    assert cache.load_back(RadixKey(A)).loaded == 16


def test_host_calls_need_the_host_tier_and_hicache_a_host_part_of_every_component():
    from cache.components import COMPONENT_REGISTRY, TreeComponent
    from cache.config.cache_config import CacheConfig

    with pytest.raises(CacheError, match="needs the host tier"):
        UnifiedRadixCache(kv_size=16, device="cpu").evict_host(1)

    class DeviceOnly(TreeComponent):  # registered without a host part
        name = "device_only"

    COMPONENT_REGISTRY.register("device_only", DeviceOnly)
    try:
        with pytest.raises(ValueError, match=r"host part of every component \(device_only has none\)"):
            CacheConfig(components=("full", "device_only"), hicache={})
    finally:
        COMPONENT_REGISTRY.unregister("device_only")
    with pytest.raises(ValueError, match="write_policy must be one of"):
        make("write_sometimes")


def test_the_checker_names_a_broken_host_tier():
    cache = make()
    insert(cache, A)
    cache.evict(EvictParams(num_tokens=16))
    node = node_of(cache, 1)
    cache.host.kv.allocator.free(node.data[0].host_value)  # the pool forgets a copy the tree holds
    assert [v.name for v in check_invariants(cache)] == ["host.pool_balance"]
    cache.host.kv.allocator.alloc(16)
    cache.tree.host_leaves.discard(node)
    assert [v.name for v in check_invariants(cache)] == ["host.leaf_set"]
    cache.tree.host_leaves.add(node)
    node.data[0].host_value = None
    assert "full.present" in [v.name for v in check_invariants(cache)]


def test_a_host_only_node_cannot_be_locked_and_a_request_admits_on_its_device_prefix():
    from cache.basics.errors import LockError

    cache = make()
    insert(cache, A)
    cache.evict(EvictParams(num_tokens=16))
    m = cache.match_prefix(RadixKey(A))
    with pytest.raises(LockError, match="host-only"):
        cache.inc_lock_ref(m.best_match_node)
    req = cache.new_request(A + [99])  # its prefix is host-only: it computes every token
    assert req.cache_protected_len == 0 and check_invariants(cache) == []
    cache.release_kv_cache(req)
    assert check_invariants(cache) == []


def test_write_back_counts_no_insert_hits_as_in_v0_5_23():
    cache = make("write_back")
    insert(cache, A), insert(cache, A)
    assert node_of(cache, 1).hit_count == 0
    through = make()
    insert(through, A), insert(through, A)
    assert node_of(through, 1).hit_count == 2


def test_a_write_back_load_keeps_its_own_path_from_host_eviction():
    """Device 32, host 17, write-back: making room for the load backs up a device leaf,
    which must evict host data — but not the copies being loaded."""
    cache = make("write_back", kv_size=32, host_kv_size=17, load_back_threshold=0)
    insert(cache, A)
    cache.evict(EvictParams(num_tokens=16))  # A: host-only, 16 of the 17 host slots
    insert(cache, B), insert(cache, C[:16])  # the device is full again
    result = cache.load_back(RadixKey(A))
    assert result.loaded == 16 and check_invariants(cache) == []
    assert verify_match(cache, A, cache.match_prefix(RadixKey(A))) == []


def test_load_back_within_a_memory_quota():
    """oracle: the load's Full tokens plus those its prefix lock newly protects (8 + 8)
    against the quota: 15 refuses the load, 16 admits it."""
    cache = make(load_back_threshold=1)
    insert(cache, A[:8])
    insert(cache, A)
    cache.evict(EvictParams(num_tokens=8))
    assert cache.load_back(RadixKey(A), mem_quota=15).loaded == 0
    assert cache.tree.protected[0] == 0 and check_invariants(cache) == []
    assert cache.load_back(RadixKey(A), mem_quota=16).loaded == 8
    with pytest.raises(CacheError, match="mem_quota must be a non-negative int"):
        cache.load_back(RadixKey(A), mem_quota=-1)
