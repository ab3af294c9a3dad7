"""The host tier with sliding-window KV (Full+SWA, Full+SWA+Mamba): live SWA gets a
host copy, host-only SWA counts for a match like live SWA, a load-back brings back
only the last window's, SWA's host LRU and host eviction, the host window lock of a
load in flight, and write-back's backup before an internal SWA tombstone. Literals
marked "oracle" come from SGLang 0.5.23's real host tier
(../shared/oracle/hicache_oracle.py, the worked examples of its spec notes)."""

from __future__ import annotations

from hicache_util import host_rows, insert

from cache import EvictParams, RadixKey, UnifiedRadixCache, check_invariants, verify_match

P, C1, C2 = [1, 2, 3, 4], [5, 6, 7, 8], [21, 22, 23, 24]


def make(policy="write_through", components=("full", "swa"), kv_size=64, swa_kv_size=None, **host):
    return UnifiedRadixCache(kv_size=kv_size, swa_kv_size=swa_kv_size, sliding_window=4, components=components,
                             mamba_size=20 if "mamba" in components else None, device="cpu",
                             hicache={"write_policy": policy, "load_back_threshold": 1, **host})


def rows(cache) -> list[tuple]:
    return host_rows(cache, with_length=False)


def test_oracle_example_swa1_window_host_hit_load_and_swa_host_eviction():
    cache = make(host_kv_size=33, host_swa_size=33)  # oracle: kv 64, ratio 0.5
    insert(cache, P + C1)  # capped to one live window: P and C1, both backed up
    assert (cache.host_available_size(), cache.host_available_size("swa")) == (25, 25)  # oracle
    insert(cache, P + C2)
    assert (cache.host_available_size(), cache.host_available_size("swa")) == (21, 21)  # oracle
    locks = []
    for key in (P + C1, P + C2):
        m = cache.match_prefix(RadixKey(key))
        locks.append((m.last_device_node, cache.inc_lock_ref(m.last_device_node)))
    r = cache.evict(EvictParams(swa_num_tokens=4))
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (0, 4)  # oracle: P's SWA, internal
    for lock in locks:
        cache.dec_lock_ref(*lock)
    r = cache.evict(EvictParams(num_tokens=8))
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (8, 8)  # oracle
    assert rows(cache) == [(4, 1, 4, 4, None, 4), (8, 5, None, 4, None, 4), (8, 21, None, 4, None, 4)]  # oracle
    m = cache.match_prefix(RadixKey(P + C1))
    # oracle: prefix 0, best depth 8, host_hit 8, swa_host_hit 4
    assert (m.prefix_len, m.host_hit_length, m.swa_host_hit_length, m.full_kv_hit_length) == (0, 8, 4, 8)
    assert cache.load_back(RadixKey(P + C1)).loaded == 8  # oracle
    assert (cache.available_size(), cache.available_size("swa")) == (56, 60)  # oracle: P's SWA stays on the host
    assert rows(cache) == [(4, 1, 4, 4, None, 4), (8, 5, 4, 4, 4, 4), (8, 21, None, 4, None, 4)]  # oracle
    assert verify_match(cache, P + C1, cache.match_prefix(RadixKey(P + C1))) == []
    assert cache.evict_host(4, "swa") == 4  # oracle: P (the SWA host LRU's oldest) loses its SWA copy only
    assert (cache.host_available_size(), cache.host_available_size("swa")) == (21, 25)  # oracle
    assert cache.evict_host(4, "swa") == 4  # oracle: C2, a host leaf, goes whole
    assert (cache.host_available_size(), cache.host_available_size("swa")) == (25, 29)  # oracle
    assert rows(cache) == [(4, 1, 4, 4, None, None), (8, 5, 4, 4, 4, 4)] and check_invariants(cache) == []


def test_oracle_example_swa_short_a_node_whose_swa_does_not_fit_is_not_backed_up():
    cache = make(swa_kv_size=16, host_kv_size=17, host_swa_size=5)  # oracle: ratio 0.25
    insert(cache, P + C1)
    assert (cache.host_available_size(), cache.host_available_size("swa")) == (13, 1)  # oracle
    assert rows(cache) == [(4, 1, 4, 4, 4, 4), (8, 5, 4, None, 4, None)]  # oracle: C1 has no copy at all


def test_oracle_example_swa_ins_an_insert_over_host_only_nodes_rebuilds_only_its_window():
    cache = make(host_kv_size=129, host_swa_size=129)
    insert(cache, P + C1)
    cache.evict(EvictParams(num_tokens=8))
    insert(cache, P + C1, floor=4)
    assert rows(cache) == [(4, 1, 4, 4, None, 4), (8, 5, 4, 4, 4, 4)]  # oracle
    cache.evict(EvictParams(num_tokens=8))
    insert(cache, [1, 2, 3, 4, 5, 6])  # splits C1: [5, 6] back on the device, [7, 8] host-only
    assert rows(cache) == [(4, 1, 4, 4, 4, 4), (6, 5, 2, 2, 2, 2), (8, 7, None, 2, None, 2)]  # oracle
    assert cache.evict_host(2, "swa") == 2  # oracle: [7, 8], a host leaf, goes whole
    assert (cache.host_available_size(), cache.host_available_size("swa")) == (123, 123)
    assert check_invariants(cache) == []


def test_oracle_example_swa_wb_write_back_reclaims_the_older_redundant_copy_first():
    cache = make("write_back", host_kv_size=33, host_swa_size=33)
    insert(cache, P + C1)
    insert(cache, P + C2)
    assert cache.host_available_size() == 33  # oracle: nothing on the host yet
    r = cache.evict(EvictParams(num_tokens=4))
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (4, 4)  # oracle
    r = cache.evict(EvictParams(num_tokens=8))
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted) == (8, 8)  # oracle
    assert cache.load_back(RadixKey(P + C1)).loaded == 8
    assert (cache.available_size(), cache.available_size("swa")) == (56, 60)  # oracle
    assert cache.evict_host(4) == 4  # oracle: the registry's pass 1 spares C1 (a device leaf), takes P's KV copy
    assert (cache.host_available_size(), cache.host_available_size("swa")) == (25, 21)  # oracle
    assert rows(cache)[0] == (4, 1, 4, None, None, 4) and check_invariants(cache) == []


def test_oracle_example_fsm_all_three_components():
    cache = make(components=("full", "swa", "mamba"), host_kv_size=33, host_swa_size=33, host_mamba_size=11)
    insert(cache, P + C1)
    assert rows(cache) == [(4, 1, 4, 4, 4, 4, None, None), (8, 5, 4, 4, 4, 4, 1, 1)]  # oracle
    r = cache.evict(EvictParams(num_tokens=8))
    assert (r.num_tokens_evicted, r.swa_num_tokens_evicted, r.mamba_num_evicted) == (8, 8, 1)  # oracle
    m = cache.match_prefix(RadixKey(P + C1))
    assert (m.prefix_len, m.host_hit_length, m.swa_host_hit_length, m.mamba_host_hit_length) == (0, 8, 4, 1)  # oracle
    assert cache.load_back(RadixKey(P + C1)).loaded == 8
    assert (cache.available_size(), cache.available_size("swa"), cache.available_size("mamba")) == (56, 60, 19)
    assert cache.evict_host(1, "mamba") == 0  # oracle: C1's state is on both tiers: the host LRU is empty
    assert check_invariants(cache) == []


def test_a_held_load_host_locks_one_window_and_a_split_keeps_its_boundary():
    cache = make(host_kv_size=129, host_swa_size=129, transfers="held")
    insert(cache, P + C1)
    cache.check_hicache_events()
    cache.evict(EvictParams(num_tokens=8))
    cache.load_back(RadixKey(P + C1))
    c1 = cache.tree.node_by_id(cache.host.in_flight[0].node.id)
    assert c1.data[1].host_lock_ref == 1 and c1.data[1].metadata.get("host_uuid") is not None
    assert cache.evict_host(8, "swa") == 4  # P's SWA copy (outside the window) goes; C1's is locked
    insert(cache, [1, 2, 3, 4, 5, 6, 9])  # splits C1, which moves the window's boundary up
    cache.check_hicache_events()
    assert all(cd.host_lock_ref == 0 for n in cache.tree.nodes.values() for cd in n.data)  # all released
    assert check_invariants(cache) == []

