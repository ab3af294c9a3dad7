"""Host-tier transfers held in flight (``hicache.transfers = "held"``): a write-through
backup keeps its node device-locked until the ack, a load-back keeps its nodes locked
on both tiers; ``check_hicache_events`` (the scenario op ``flush``) completes them.
Literals marked "oracle" come from SGLang 0.5.23's real host tier
(../shared/oracle/hicache_oracle.py), which holds a write-through lock until its
``events`` op exactly so."""

from __future__ import annotations

import pytest

from hicache_util import insert

from cache import EvictParams, RadixKey, UnifiedRadixCache, check_invariants, verify_match
from cache.observe.events import EventKind
from cache.basics.params import MatchPrefixParams

A = [1, 2, 3, 4, 5, 6, 7, 8]


def make(policy="write_through", transfers="held", kv_size=32, **host) -> UnifiedRadixCache:
    return UnifiedRadixCache(kv_size=kv_size, device="cpu",
                             hicache={"write_policy": policy, "transfers": transfers, "load_back_threshold": 1,
                                      **host})


def marked(cache) -> dict[tuple[int, ...], str]:
    return {tuple(n.token_ids): n.data[0].metadata["transfer"][0] for n in cache.tree.nodes.values()
            if "transfer" in n.data[0].metadata}


def test_a_held_write_through_locks_its_node_until_the_ack():
    cache = make()
    insert(cache, A)
    # oracle: after the insert, protected 8 and evictable 0 until its events op
    assert (cache.tree.protected[0], cache.tree.evictable[0]) == (8, 0)
    assert marked(cache) == {tuple(A): "backup"}
    assert cache.evict(EvictParams(num_tokens=32)).num_tokens_evicted == 0  # oracle: evicts 0
    assert cache.check_hicache_events() == 1
    assert (cache.tree.protected[0], cache.tree.evictable[0]) == (0, 8) and marked(cache) == {}
    assert cache.check_hicache_events() == 0 and check_invariants(cache) == []


def test_a_split_passes_the_transfer_and_its_lock_to_the_upper_part():
    cache = make()
    insert(cache, A)
    insert(cache, [1, 2, 3, 4, 9, 9])
    # oracle: protected 10 (the split's upper half inherits the lock, the new leaf has its own)
    assert cache.tree.protected[0] == 10
    assert marked(cache) == {(1, 2, 3, 4): "backup", (5, 6, 7, 8): "backup", (9, 9): "backup"}
    assert cache.check_hicache_events() == 2
    assert (cache.tree.protected[0], cache.tree.evictable[0]) == (0, 10) and marked(cache) == {}
    assert check_invariants(cache) == []


def test_a_held_load_back_keeps_its_path_on_both_tiers_until_the_ack():
    cache = make(host_kv_size=64)
    insert(cache, A)
    cache.check_hicache_events()
    cache.evict(EvictParams(num_tokens=8))
    result = cache.load_back(RadixKey(A))
    assert result.loaded == 8 and marked(cache) == {tuple(A): "load"}
    node = cache.tree.node_by_id(result.last_device_node)
    assert node.data[0].lock_ref == 1 and node.data[0].host_lock_ref == 1 and check_invariants(cache) == []
    # the loaded KV is already readable: a match verifies by fingerprint
    match = cache.match_prefix(MatchPrefixParams(RadixKey(A)))
    assert match.prefix_len == 8 and verify_match(cache, A, match) == []
    assert cache.evict(EvictParams(num_tokens=8)).num_tokens_evicted == 0
    assert cache.check_hicache_events() == 1
    assert node.data[0].lock_ref == 0 and node.data[0].host_lock_ref == 0 and marked(cache) == {}
    assert cache.evict(EvictParams(num_tokens=8)).num_tokens_evicted == 8 and check_invariants(cache) == []


def test_write_back_reclaims_a_held_load_only_after_its_ack():
    cache = make("write_back", host_kv_size=64)
    insert(cache, A)
    cache.evict(EvictParams(num_tokens=8))  # written back at eviction: no transfer left open
    assert cache.host.in_flight == [] and marked(cache) == {}
    node = cache.tree.node_by_id(cache.load_back(RadixKey(A)).last_device_node)
    # the entry its write-back's ack made is kept in place (stale while it was host-only, as in v0.5.23)
    assert list(cache.tree.host_duplicates) == [node.id]
    assert cache.evict_host(8) == 0  # in flight and host-locked: neither a host leaf nor reclaimable yet
    cache.check_hicache_events()
    assert cache.evict_host(8) == 8 and node.data[0].value is not None and check_invariants(cache) == []


def test_a_split_of_a_node_loading_releases_both_parts_host_locks_at_the_ack():
    cache = make(host_kv_size=64)
    insert(cache, A)
    cache.check_hicache_events()
    cache.evict(EvictParams(num_tokens=8))
    cache.load_back(RadixKey(A))
    insert(cache, [1, 2, 3, 4, 9, 9])  # splits the node being loaded
    assert marked(cache) == {(1, 2, 3, 4): "load", (5, 6, 7, 8): "load", (9, 9): "backup"}
    cache.check_hicache_events()
    assert all(n.data[0].host_lock_ref == 0 and n.data[0].lock_ref == 0 for n in cache.tree.nodes.values()
               if n is not cache.tree.root)
    assert check_invariants(cache) == []


def test_the_events_say_queued_then_completed():
    cache = make()
    seen = []
    cache.events.subscribe(seen.append)
    insert(cache, A)
    cache.check_hicache_events()
    transfers = [e.detail for e in seen if e.kind is EventKind.TRANSFER]
    assert transfers == ["backup queued (device -> host)", "backup completed (device -> host)"]


def test_immediate_transfers_leave_nothing_in_flight():
    cache = make(transfers="immediate")
    insert(cache, A)
    assert cache.tree.protected[0] == 0 and cache.host.in_flight == [] and cache.check_hicache_events() == 0


def test_the_checker_names_a_transfer_whose_lock_went_missing():
    cache = make()
    insert(cache, A)
    transfer = cache.host.in_flight[0]
    cache.tree.dec_lock_ref(transfer.node.id, transfer.receipt)  # a leak the other way: released early
    assert any(v.name == "host.transfer" for v in check_invariants(cache))


def test_an_unknown_transfer_mode_is_refused():
    with pytest.raises(ValueError, match="transfers must be one of immediate, held"):
        make(transfers="async")
