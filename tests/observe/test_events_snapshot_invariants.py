"""The observation surfaces: the event stream, the snapshot and the invariant checker."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cache import Cause, EventKind, EventLog, EvictParams, InsertParams, RadixKey, check_invariants

from conftest import Checked


@pytest.fixture
def small() -> Checked:
    return Checked(page_size=1, kv_size=64)


def kinds(events, kind):
    return [e for e in events if e.kind == kind]


def test_insert_events_name_the_split_the_new_leaf_and_the_duplicates(small):
    log = EventLog(small.cache.events)
    small.insert([1, 2, 3, 4, 5, 6])
    small.insert([1, 2, 3, 9, 9])
    events = log.take()
    ops = {e.op for e in events}
    assert "insert" in ops
    split = kinds(events, EventKind.SPLIT)
    assert len(split) == 1 and split[0].tokens == 3
    adds = kinds(events, EventKind.ADD)
    assert [e.tokens for e in adds] == [6, 2]
    dup = [e for e in kinds(events, EventKind.FREE) if e.cause == Cause.DUPLICATE]
    assert len(dup) == 1 and dup[0].tokens == 3 and dup[0].node == split[0].node


def test_eviction_events_carry_capacity_cause_and_one_op_number(small):
    small.insert([1, 2, 3])
    small.insert([4, 5, 6])
    log = EventLog(small.cache.events)
    small.evict(6)
    events = log.take()
    assert {e.op for e in events} == {"evict"}
    assert len({e.seq for e in events}) == 1
    assert [e.cause for e in kinds(events, EventKind.EVICT)] == [Cause.CAPACITY] * 2
    assert sum(e.tokens for e in kinds(events, EventKind.FREE)) == 6
    assert len(kinds(events, EventKind.DELETE)) == 2


def test_lock_events_walk_the_path_and_nested_ops_keep_the_outer_name(small):
    cache = small.cache
    small.insert([1, 2, 3, 4])
    small.insert([1, 2, 7, 8])
    log = EventLog(cache.events)
    m = small.match([1, 2, 7, 8])
    receipt = small.lock(m.last_device_node)
    locks = kinds(log.take(), EventKind.LOCK)
    assert [e.tokens for e in locks] == [2, 2]  # [7 8] then its parent [1 2]
    small.unlock(m.last_device_node, receipt)
    assert len(kinds(log.take(), EventKind.UNLOCK)) == 2
    req = cache.new_request([1, 2, 7, 8, 5])
    cache.release_kv_cache(req)
    finished = [e for e in log.take() if e.op == "release_kv_cache"]
    assert finished and {e.kind for e in finished} >= {EventKind.ADD, EventKind.LOCK, EventKind.UNLOCK}
    small.ok()


def test_unsubscribing_turns_emission_off(small):
    log = EventLog(small.cache.events)
    log.close()
    small.insert([1, 2])
    assert log.events == [] and small.cache.events.enabled is False


def test_snapshot_is_immutable_and_detached(small):
    cache = small.cache
    small.insert([1, 2, 3, 4])
    small.insert([1, 2, 5])
    snap = cache.snapshot()
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.nodes[1].key = (9,)
    with pytest.raises(TypeError):
        snap.pools["full"] = None
    cache.evict(EvictParams(num_tokens=64))
    assert len(snap.nodes) == 4 and len(cache.snapshot().nodes) == 1  # the old one did not move


def test_snapshot_paths_ranks_and_pools(small):
    cache = small.cache
    small.insert([1, 2, 3, 4])
    small.insert([1, 2, 5, 6])
    small.match([1, 2, 3, 4])
    req = cache.new_request([1, 2, 3, 4, 7, 7, 7])
    snap = cache.snapshot()
    paths = [n.path for n in snap.nodes]
    assert paths == [(), (1, 2), (1, 2, 3, 4), (1, 2, 5, 6)]  # DFS, children by first token
    leaf = snap.nodes[2]
    assert leaf.components["full"].lock_ref == 1 and not leaf.evictable_leaf
    assert snap.lru["full"][0] == leaf.id  # most recently matched first
    assert snap.evictable_leaves == (snap.nodes[3].id,)
    pool = snap.pools["full"]
    assert pool.held == 3 and pool.protected == 4 and pool.evictable == 2
    assert pool.available + pool.evictable + pool.protected + pool.held == pool.total
    cache.release_kv_cache(req)
    small.ok()


def corrupt_and_check(small, mutate, expected_name):
    small.insert([1, 2, 3, 4])
    small.insert([1, 2, 5, 6])
    mutate(small.cache)
    names = {v.name for v in check_invariants(small.cache)}
    assert expected_name in names, names


def test_checker_names_a_drifted_counter(small):
    corrupt_and_check(small, lambda c: c.tree.evictable.__setitem__(0, 99), "counter.evictable")


def test_checker_names_a_stale_leaf_set(small):
    def mutate(cache):
        leaf = next(iter(cache.tree.leaves))
        cache.tree.leaves.discard(leaf)

    corrupt_and_check(small, mutate, "leaf_set")


def test_checker_names_a_leaked_slot(small):
    corrupt_and_check(small, lambda c: c.kv_pool.alloc(3), "pool.full.balance")


def test_checker_names_a_slot_owned_twice(small):
    def mutate(cache):
        a, b = (n for n in cache.tree.nodes.values() if n.children == {} and n is not cache.tree.root)
        b.data[0].value = torch.cat([a.data[0].value[:1], b.data[0].value[1:]])

    corrupt_and_check(small, mutate, "pool.full.owned_twice")


def test_checker_names_a_negative_lock_and_never_raises(small):
    def mutate(cache):
        node = next(iter(cache.tree.leaves))
        node.data[0].lock_ref = -1
        node.children = None  # a broken node the checker must survive

    small.insert([1, 2, 3, 4])
    mutate(small.cache)
    violations = check_invariants(small.cache)
    assert violations and all(isinstance(v.name, str) for v in violations)


def test_verify_match_catches_a_wrong_slot(small):
    cache = small.cache
    small.insert([1, 2, 3, 4])
    small.insert([5, 6, 7, 8])
    m = cache.match_prefix(RadixKey([1, 2, 3, 4]))
    other = cache.match_prefix(RadixKey([5, 6, 7, 8]))
    forged = m._replace(device_indices=torch.cat([m.device_indices[:2], other.device_indices[2:]]))
    from cache import verify_match

    bad = verify_match(cache, [1, 2, 3, 4], forged)
    assert bad and bad[0].name == "match.fingerprint" and "position 2" in bad[0].message
    assert verify_match(cache, [1, 2, 3, 4], m) == []


def test_values_are_fingerprinted_on_insert_path(small):
    cache = small.cache
    slots = cache.alloc_kv(4)
    cache.write_kv(slots, [1, 2, 3, 4])
    cache.insert(InsertParams(RadixKey([1, 2, 3, 4]), slots))
    assert cache.kv_buffer.mismatches(slots, [1, 2, 3, 4]) == []
    assert cache.kv_buffer.mismatches(slots, [1, 2, 3, 5]) == [3]
