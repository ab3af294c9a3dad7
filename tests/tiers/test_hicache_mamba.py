"""The host tier with Mamba states (Full+Mamba): a state gets a host copy beside its
node's KV, is demoted with it, sits in Mamba's host LRU while it is on the host only,
and comes back with a load-back; Mamba's own host eviction; write-back's backup of an
internal node before its state is tombstoned. Literals marked "oracle" come from
SGLang 0.5.23's real host tier (../shared/oracle/hicache_oracle.py)."""

from __future__ import annotations

import pytest
import torch

from hicache_util import host_rows, insert

from cache import EvictParams, RadixKey, UnifiedRadixCache, check_invariants, verify_match
from cache.basics.errors import CacheError

A, B = [1, 2, 3, 4, 5, 6, 7, 8], [21, 22, 23, 24]


def make(policy="write_through", kv_size=64, mamba_size=20, **host) -> UnifiedRadixCache:
    return UnifiedRadixCache(kv_size=kv_size, components=("full", "mamba"), mamba_size=mamba_size, device="cpu",
                             hicache={"write_policy": policy, "load_back_threshold": 1, **host})


def node_at(cache, tokens):
    """The node whose path is ``tokens`` (read-only: a match would refresh the LRUs)."""
    def path(node):
        out = []
        while node is not cache.tree.root:
            out[:0] = node.token_ids
            node = node.parent
        return out

    return next(n for n in cache.tree.nodes.values() if n is not cache.tree.root and path(n) == tokens)


def rows(cache) -> list[tuple]:
    return host_rows(cache, with_length=True)


def test_oracle_example_mamba1_backup_demote_hit_load_and_mamba_host_eviction():
    """The oracle's worked example (kv 64, mamba 20, ratio 0.5: host 33 tokens, 11 states)."""
    cache = make(host_kv_size=33, host_mamba_size=11)
    insert(cache, A)
    assert (cache.host_available_size(), cache.host_available_size("mamba")) == (25, 10)  # oracle
    insert(cache, [1, 2, 3, 4, *B])
    assert (cache.host_available_size(), cache.host_available_size("mamba")) == (21, 9)  # oracle
    # oracle: P full[4,4] mamba[null,null]; C1 full[4,4] mamba[1,1]; C2 full[4,4] mamba[1,1]
    assert rows(cache) == [(4, 4, 1, 4, 4, None, None), (8, 4, 5, 4, 4, 1, 1), (8, 4, 21, 4, 4, 1, 1)]
    r = cache.evict(EvictParams(mamba_num=1))
    assert (r.num_tokens_evicted, r.mamba_num_evicted) == (4, 1)  # oracle: the leaf C1 is demoted whole
    m = cache.match_prefix(RadixKey(A))
    # oracle: prefix 0, best 8, host_hit 8, mamba_host_hit 1, no branching point
    assert (m.prefix_len, m.host_hit_length, m.mamba_host_hit_length, m.mamba_branching_seqlen) == (0, 8, 1, None)
    assert cache.tree.node_by_id(m.best_match_node).length == 4
    result = cache.load_back(RadixKey(A))
    assert result.loaded == 8 and check_invariants(cache) == []
    assert (cache.available_size(), cache.available_size("mamba")) == (52, 18)  # oracle
    r = cache.evict(EvictParams(num_tokens=8))
    assert (r.num_tokens_evicted, r.mamba_num_evicted) == (8, 2)  # oracle
    assert cache.evict_host(1, "mamba") == 1  # oracle: C2, the Mamba host LRU's oldest, deleted whole
    assert (cache.host_available_size(), cache.host_available_size("mamba")) == (25, 10)  # oracle
    m = cache.match_prefix(RadixKey([1, 2, 3, 4, *B]))
    assert (m.best_match_node, m.full_kv_hit_length) == (cache.tree.root.id, 4)  # oracle: P has no state
    assert check_invariants(cache) == []


def test_a_loaded_state_holds_the_right_fingerprint():
    cache = make()
    insert(cache, A)
    node = node_at(cache, A)
    host = cache.host.aux["mamba"]
    assert host.fingerprint_of(node.data[1].host_value) == cache.by_name["mamba"].pool.fingerprint_of(node.data[1].value)
    cache.evict(EvictParams(num_tokens=8))
    assert list(cache.tree.host_lru["mamba"]) == [node]
    cache.load_back(RadixKey(A))
    assert len(cache.tree.host_lru["mamba"]) == 0
    m = cache.match_prefix(RadixKey(A))
    assert m.prefix_len == 8 and verify_match(cache, A, m) == []
    assert torch.equal(cache.by_name["mamba"].pool.fingerprint[node.data[1].value],
                       host.fingerprint[node.data[1].host_value])


def test_mamba_host_eviction_of_an_internal_node_takes_only_its_state():
    cache = make()
    insert(cache, A)
    insert(cache, A + [9, 10])  # A is now internal
    cache.evict(EvictParams(mamba_num=1))  # A's state, the oldest: a tombstone with a host copy
    a = node_at(cache, A)
    assert a.data[1].value is None and a.data[1].host_value is not None and a.data[0].value is not None
    assert cache.evict_host(1, "mamba") == 1
    assert a.data[1].host_value is None and cache.tree.backed_up(a)  # the node and its KV copy stay
    assert cache.match_prefix(RadixKey(A)).mamba_host_hit_length == 0 and check_invariants(cache) == []


def test_a_node_whose_state_the_host_cannot_take_is_not_backed_up_at_all():
    cache = make(host_mamba_size=1)
    insert(cache, A)
    assert cache.host_available_size("mamba") == 0
    before = cache.host_available_size()
    insert(cache, B)  # its state finds no host slot (A's state is on the device: nothing to evict)
    assert not cache.tree.backed_up(node_at(cache, B)) and cache.host_available_size() == before
    assert check_invariants(cache) == []


def test_write_back_backs_up_an_internal_node_before_tombstoning_its_state():
    cache = make("write_back")
    insert(cache, A)
    insert(cache, A + [9, 10])
    a = node_at(cache, A)
    assert not cache.tree.backed_up(a)
    cache.evict(EvictParams(mamba_num=1))
    assert cache.tree.backed_up(a) and a.data[1].host_value is not None and a.data[1].value is None
    assert list(cache.tree.host_duplicates) == [a.id] and check_invariants(cache) == []


def test_host_mamba_size_needs_mamba_and_evict_host_a_known_component():
    with pytest.raises(ValueError, match="host_mamba_size needs the mamba component"):
        UnifiedRadixCache(kv_size=16, device="cpu", hicache={"host_mamba_size": 4})
    with pytest.raises(ValueError, match="host_mamba_size must be a positive int"):
        make(host_mamba_size=0)
    assert make().host.aux["mamba"].size == 41  # SGLang's size for hicache_ratio 2: twice 20, plus one
    with pytest.raises(CacheError, match="no host copies of 'swa'"):
        make().evict_host(1, "swa")


def test_a_state_load_back_takes_the_requests_slot_too_as_in_v0_5_23():
    """oracle (a review's repro): 3 state slots, three prompts; evicting one state demotes
    [1..4]; loading it back needs the node's slot and the loading request's own (taken
    first, handed back after): with one slot free the oldest leaf [5..8] is demoted."""
    cache = make(kv_size=64, mamba_size=3, host_kv_size=65, host_mamba_size=4, load_back_threshold=2)
    for key in ([1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]):
        insert(cache, key)
    cache.evict(EvictParams(mamba_num=1))
    assert cache.load_back(RadixKey([1, 2, 3, 4])).loaded == 4
    assert rows(cache) == [(4, 4, 1, 4, 4, 1, 1), (4, 4, 5, None, 4, None, 1), (4, 4, 9, 4, 4, 1, 1)]  # oracle
    assert cache.available_size("mamba") == 1 and check_invariants(cache) == []
    with pytest.raises(CacheError, match="no host pool for 'swa'"):
        cache.host_available_size("swa")
