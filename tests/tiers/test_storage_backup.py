"""The storage tier's backup (cache/tiers/storage.py): after a host backup's ack every
node it published is written to storage by its page hashes, ancestors first, holding a
host lock on the node until the store's own ack (v0.5.23's write_backup_storage and
ongoing_backup). Immediate stores finish within their op; held ones at the next flush."""

from __future__ import annotations

import pytest

from cache.config.cache_config import CacheConfig
from cache.controller.unified_radix_cache import UnifiedRadixCache
from cache.checks.invariants import check_invariants
from cache.basics.page_hash import chain
from cache.basics.params import EvictParams, InsertParams
from cache.tiers.backends import BATCH_PAGES as STORAGE_BATCH_PAGES

STORAGE = {"backend": "memory"}


def make(transfers="immediate", page_size=4, kv_size=32, host_kv_size=None, write_policy="write_through"):
    hicache = {"transfers": transfers, "write_policy": write_policy, "storage": STORAGE}
    if host_kv_size is not None:
        hicache["host_kv_size"] = host_kv_size
    return UnifiedRadixCache(components=["full"], kv_size=kv_size, page_size=page_size, device="cpu", hicache=hicache)


def insert(cache, key):
    value = cache.kv_pool.alloc(len(key))
    result = cache.insert(InsertParams(key=key, value=value))  # the insert frees what it already held
    assert check_invariants(cache) == []
    return result


def node_at(cache, first_token):
    """The node whose key starts with ``first_token``."""
    return next(n for n in cache.tree.nodes.values() if n is not cache.tree.root and n.token_ids[0] == first_token)


def stored(cache) -> list[str]:
    return cache.host.storage.stored_keys()


def test_immediate_store_writes_the_node_pages_by_hash_within_the_op():
    cache = make()
    insert(cache, list(range(1, 9)))
    node = node_at(cache, 1)
    assert stored(cache) == sorted(node.page_hashes)
    assert node.page_hashes == chain(node.key, 4, None)  # the node's own chain from the root
    assert cache.host.storage.in_flight == [] and node.data[0].host_lock_ref == 0
    assert cache.host.storage.stored_tokens == 8


def test_held_store_keeps_its_host_lock_until_the_next_flush():
    cache = make("held")
    insert(cache, list(range(1, 9)))
    node = node_at(cache, 1)
    assert stored(cache) == [] and cache.host.storage.in_flight == []  # the backup itself is still in flight
    assert cache.check_hicache_events() == 1  # the backup's ack queues the store
    assert [s.node for s in cache.host.storage.in_flight] == [node]
    assert node.data[0].host_lock_ref == 1 and stored(cache) == []
    cache.evict(EvictParams(8))  # demoted: host-only, but host-locked by its store
    assert node.data[0].value is None and node not in cache.tree.host_leaves
    assert cache.evict_host(8) == 0 and check_invariants(cache) == []
    assert cache.check_hicache_events() == 1  # written and acknowledged
    assert stored(cache) == sorted(node.page_hashes) and node.data[0].host_lock_ref == 0
    assert cache.evict_host(8) == 8 and node.id not in cache.tree.nodes
    assert len(stored(cache)) == 2  # storage keeps the pages once the host copy is gone
    assert check_invariants(cache) == []


def test_stores_follow_the_ack_ancestors_first_with_split_off_parts():
    """A split while the backup is in flight: its ack publishes the upper part and
    the lower one, and the stores go root side first (v0.5.23 sorts by depth)."""
    cache = make("held")
    insert(cache, list(range(1, 9)))
    insert(cache, [1, 2, 3, 4, 20, 21, 22, 23])  # splits [1..8] at 4; a new leaf [20..23]
    upper, lower, leaf = node_at(cache, 1), node_at(cache, 5), node_at(cache, 20)
    assert cache.check_hicache_events() == 2
    assert [s.node for s in cache.host.storage.in_flight] == [upper, lower, leaf]
    assert [s.keys for s in cache.host.storage.in_flight] == [tuple(n.page_hashes) for n in (upper, lower, leaf)]
    assert cache.check_hicache_events() == 3
    assert stored(cache) == sorted(upper.page_hashes + lower.page_hashes + leaf.page_hashes)


def test_a_split_while_a_store_is_in_flight_releases_both_parts_at_its_ack():
    cache = make("held")
    insert(cache, list(range(1, 9)))
    cache.check_hicache_events()  # the store of [1..8] is in flight, its node host-locked
    insert(cache, [1, 2, 3, 4, 30, 31, 32, 33])  # splits it: the upper part carries the lock and the mark
    upper, lower = node_at(cache, 1), node_at(cache, 5)
    assert upper.data[0].host_lock_ref == lower.data[0].host_lock_ref == 1
    cache.check_hicache_events()  # the store's ack; the new leaf's backup acks and queues its own store
    assert upper.data[0].host_lock_ref == lower.data[0].host_lock_ref == 0
    assert len(stored(cache)) == 2 and check_invariants(cache) == []
    cache.check_hicache_events()
    assert len(stored(cache)) == 3 and all(n.data[0].host_lock_ref == 0 for n in cache.tree.nodes.values())


def test_storing_the_same_pages_again_changes_nothing():
    cache = make()
    insert(cache, list(range(1, 9)))
    before = stored(cache)
    cache.evict(EvictParams(8))
    cache.evict_host(8)
    assert len(cache.tree.nodes) == 1
    insert(cache, list(range(1, 9)))  # a new node with the same pages: the same keys
    assert stored(cache) == before and cache.host.storage.stored_tokens == 16


def test_a_failed_batch_ends_the_store_and_still_releases_the_lock():
    cache = make(page_size=1, kv_size=400, host_kv_size=400)
    backend = cache.host.storage.backend
    calls = []
    real_set = backend.set

    def failing_second_batch(keys, pages):
        calls.append(len(keys))
        return real_set(keys, pages) if len(calls) != 2 else [False] * len(keys)

    backend.set = failing_second_batch
    insert(cache, list(range(1, 301)))
    assert calls == [STORAGE_BATCH_PAGES, STORAGE_BATCH_PAGES]  # the third batch is not attempted
    assert len(stored(cache)) == STORAGE_BATCH_PAGES and cache.host.storage.stored_tokens == STORAGE_BATCH_PAGES
    assert node_at(cache, 1).data[0].host_lock_ref == 0


def test_page_bytes_are_the_host_rows_fingerprints():
    cache = make()
    insert(cache, list(range(1, 9)))
    node = node_at(cache, 1)
    backend = cache.host.storage.backend
    rows = cache.host.kv.buffer.data[node.data[0].host_value[:4]]
    assert backend.get([node.page_hashes[0]]) == [rows.numpy().astype("<i8").tobytes()]


def test_write_back_stores_what_eviction_backed_up():
    cache = make(write_policy="write_back")
    insert(cache, list(range(1, 9)))
    assert stored(cache) == []  # write-back: no host copy yet
    cache.evict(EvictParams(8))
    node = node_at(cache, 1)
    assert stored(cache) == sorted(node.page_hashes) and cache.host.storage.in_flight == []
    assert node.data[0].host_lock_ref == 0 and check_invariants(cache) == []


def test_a_write_back_store_in_a_scheduler_step_is_acked_when_the_step_ends():
    """Within one scheduler step the store an eviction queued holds its node's host lock
    through the step's later calls (a split of that node included), as SGLang acks it
    at its next poll; the step's end writes and releases it."""
    cache = make(write_policy="write_back")
    insert(cache, list(range(1, 9)))
    with cache.scheduler_step():
        cache.evict(EvictParams(8))
        node = node_at(cache, 1)
        assert node.data[0].host_lock_ref == 1 and stored(cache) == []
        assert [s.node for s in cache.host.storage.in_flight] == [node]
        insert(cache, [1, 2, 3, 4, 99, 98, 97, 96])  # splits the stored node under its lock
        upper = node_at(cache, 1)
        assert upper is not node and upper.data[0].host_lock_ref == 1
    assert cache.host.storage.in_flight == [] and len(stored(cache)) == 2
    assert upper.data[0].host_lock_ref == 0 and node.data[0].host_lock_ref == 0
    assert check_invariants(cache) == []


def test_an_allocation_keeps_its_stores_host_locked_until_its_eviction_ends():
    """The walk backs A up (its store host-locks it) and goes on to B, whose backup
    finds no host room it may take: B is dropped, A's copy stays (v0.5.23 acks the
    store at the poll after the step, not while the walk checks its target)."""
    cache = make(write_policy="write_back", kv_size=16, host_kv_size=8)
    insert(cache, list(range(1, 9)))
    insert(cache, list(range(11, 19)))
    slots = cache.alloc_kv(16)
    assert [n.token_ids[0] for n in cache.tree.nodes.values() if n is not cache.tree.root] == [1]
    assert len(stored(cache)) == 2 and cache.host.storage.in_flight == []
    cache.free_kv([slots])
    assert check_invariants(cache) == []


def test_held_write_back_store_waits_for_the_flush():
    cache = make("held", write_policy="write_back")
    insert(cache, list(range(1, 9)))
    cache.evict(EvictParams(8))
    node = node_at(cache, 1)
    assert node.data[0].host_lock_ref == 1 and stored(cache) == []
    assert cache.evict_host(8) == 0
    assert cache.check_hicache_events() == 1 and len(stored(cache)) == 2
    assert check_invariants(cache) == []


def test_the_invariants_catch_a_lost_host_lock_and_a_stale_mark():
    cache = make("held")
    insert(cache, list(range(1, 9)))
    cache.check_hicache_events()
    node = node_at(cache, 1)
    node.data[0].host_lock_ref = 0
    assert any(v.name == "host.lock_balance" for v in check_invariants(cache))
    node.data[0].host_lock_ref = 1
    cache.host.storage.in_flight.clear()
    assert any(v.name == "storage.store" for v in check_invariants(cache))


def test_the_snapshot_shows_the_storage_tier():
    cache = make("held")
    insert(cache, list(range(1, 9)))
    cache.check_hicache_events()
    node = node_at(cache, 1)
    view = cache.snapshot().storage
    assert (view.backend, view.keys, view.in_flight, view.stored_tokens) == ("memory", (), ((1, node.id, 2),), 0)
    assert cache.snapshot().node(node.id).components["full"].extras["store"] == 1
    cache.check_hicache_events()
    view = cache.snapshot().storage
    assert view.keys == tuple(sorted(node.page_hashes)) and view.in_flight == () and view.stored_tokens == 8
    assert make().snapshot().storage.keys == () and UnifiedRadixCache(
        components=["full"], kv_size=8, device="cpu", hicache={}).snapshot().storage is None


@pytest.mark.parametrize("storage, message", [
    ({"backend": "memory", "size": 3}, "unknown hicache storage field 'size'; known: backend, path, budget, prefetch_policy"),
    ({"backend": "s3"}, "backend must be one of memory, file (got 's3')"),
    ({"budget": -1}, "budget must be a positive int of bytes"),
    ({"path": "/tmp/x"}, "path is the file backend's directory"),
    ({"prefetch_policy": "eager"}, "prefetch_policy must be one of best_effort, wait_complete, timeout (got 'eager')"),
    ({"prefetch_threshold": -4}, "prefetch_threshold must be a non-negative int (got -4)"),
    ({"prefetch_timeout_per_page": "1"}, "prefetch_timeout_per_page must be a non-negative number"),
    ("memory", "hicache storage must be a table of backend, path, budget"),
    ({"inject": [{"call": "set", "outcome": "delay", "steps": 2}]}, "a store's set is not delayed yet"),
])
def test_storage_config_errors(storage, message):
    with pytest.raises(ValueError, match=None) as error:
        CacheConfig.of(components=["full"], kv_size=16, hicache={"storage": storage})
    assert message in str(error.value)


def test_storage_refuses_a_sidecar():
    with pytest.raises(ValueError) as error:
        CacheConfig.of(components=["full", "sidecar"], kv_size=16, hicache={"storage": STORAGE})
    assert "stores full, swa, mamba so far: storing sidecar is not supported yet" in str(error.value)


def test_the_config_line_names_the_storage_tier():
    from cache.config.reference import config_line

    line = config_line({"components": ["full"], "kv_size": 8, "hicache": {"storage": {"backend": "memory"}}})
    assert line == "full · page 1 · hicache write_through · storage memory"
