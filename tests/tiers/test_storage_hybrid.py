"""The storage tier with SWA and Mamba (cache/tiers/staging.py, SGLang 0.5.23's hybrid
storage path): a store writes a node's host SWA under its last page hashes and its state
under its last hash, host-locking them until its ack; a prefetch asks for the longest
prefix whose state and window are stored where it ends, stages them beside the KV and
keeps everything or nothing. Invariants after every call; loaded slots verified."""

from __future__ import annotations

import torch

from cache import EvictParams, InsertParams, RadixKey, UnifiedRadixCache, check_invariants, verify_match
from cache.basics.page_hash import chain, storage_seed
from cache.tiers.staging import storage_key

A = list(range(1, 17))  # four pages of 4


def make(components=("full", "swa", "mamba"), transfers="immediate", threshold=8, window=8, **storage):
    return UnifiedRadixCache(components=components, kv_size=64, page_size=4, sliding_window=window,
                             mamba_size=8 if "mamba" in components else None, device="cpu", hicache={
                                 "write_policy": "write_through", "transfers": transfers, "load_back_threshold": 4,
                                 "storage": {"backend": "memory", "prefetch_threshold": threshold, **storage}})


def checked(cache):
    assert check_invariants(cache) == []
    return cache


def insert(cache, tokens):
    slots = cache.alloc_kv(len(tokens))
    cache.write_kv(slots, tokens)
    state = cache.alloc_mamba_state(tokens) if "mamba" in cache.by_name else None
    result = cache.insert(InsertParams(RadixKey(tokens), slots, state))
    if state is not None and result.mamba_exist:
        cache.free_mamba_state(state)
    return checked(cache)


def forget(cache):
    """Every copy off the device and the host: only storage still holds the pages."""
    for _ in range(3):
        cache.check_hicache_events()
    cache.evict(EvictParams(num_tokens=64, swa_num_tokens=64, mamba_num=8))
    cache.evict_host(64)
    assert len(cache.tree.nodes) == 1
    return checked(cache)


def keys(cache):
    return set(cache.host.storage.stored_keys())


def leaf(cache):
    return next(n for n in cache.tree.nodes.values() if n is not cache.tree.root and not n.children)


def test_a_store_writes_the_kv_the_host_window_and_the_state_by_hash():
    cache = insert(make(), A)
    node = leaf(cache)
    swa, mamba = cache.by_name["swa"], cache.by_name["mamba"]
    window = node.data[swa.index].host_value
    assert window is not None and node.data[mamba.index].host_value is not None
    pages = window.shape[0] // 4
    expected = {h for n in cache.tree.nodes.values() if n.page_hashes for h in n.page_hashes}
    expected |= {storage_key(h, "swa") for n in cache.tree.nodes.values()
                 if n.data[swa.index].host_value is not None for h in n.page_hashes[-(n.length // 4):]}
    expected.add(storage_key(node.page_hashes[-1], "mamba"))
    assert keys(cache) == expected and len([k for k in expected if k.endswith(".swa")]) >= pages
    backend, host = cache.host.storage.backend, cache.host
    assert backend.get([storage_key(node.page_hashes[-1], "swa")]) == [host.pool("swa").page_bytes(window[-4:])]
    assert backend.get([storage_key(node.page_hashes[-1], "mamba")]) == [
        host.pool("mamba").page_bytes(node.data[mamba.index].host_value)]


def test_a_held_store_host_locks_the_window_and_the_state_until_its_ack():
    cache = make(transfers="held")
    insert(cache, A)
    cache.check_hicache_events()  # the backup's ack queues the stores
    node = leaf(cache)
    swa, mamba = cache.by_name["swa"], cache.by_name["mamba"]
    assert node.data[swa.index].host_lock_ref == 1 and node.data[mamba.index].host_lock_ref == 1
    cache.check_hicache_events()  # the stores' acks
    assert node.data[swa.index].host_lock_ref == 0 and node.data[mamba.index].host_lock_ref == 0
    assert checked(cache) and any(k.endswith(".mamba") for k in keys(cache))


def test_a_prefetch_brings_the_window_and_the_state_and_loads_back_verified():
    cache = forget(insert(make(), A))
    issue = cache.prefetch_from_storage("r1", RadixKey(A + [99]))
    assert (issue.issued, issue.tokens) == (True, 16) and checked(cache)
    assert cache.check_prefetch_progress("r1") and cache.pop_prefetch_loaded_tokens("r1") == 16
    end = leaf(cache)
    swa, mamba = cache.by_name["swa"], cache.by_name["mamba"]
    assert end.data[mamba.index].host_value is not None  # the state where the fetched pages end
    covered, node = 0, end
    while node is not cache.tree.root and node.data[swa.index].host_value is not None:
        covered, node = covered + node.length, node.parent
    assert covered == 8  # one window of host SWA on the tail, none above it
    assert cache.load_back(RadixKey(A)).loaded == 16 and checked(cache)
    match = cache.match_prefix(RadixKey(A))
    assert match.device_prefix_len == 16 and verify_match(cache, RadixKey(A), match) == []


def test_the_hit_ends_where_the_state_was_stored():
    """KV is stored for all four pages, the state where each node ended (pages 2 and 4);
    with the one at page 4 gone, the hit is cut back to page 2."""
    cache = make(components=("full", "mamba"))
    insert(cache, A[:8])
    insert(cache, A)
    forget(cache)
    hashes = chain(RadixKey(A).data, 4, storage_seed(None, None))
    assert {k for k in keys(cache) if k.endswith(".mamba")} == {storage_key(hashes[1], "mamba"),
                                                               storage_key(hashes[3], "mamba")}
    cache.host.storage.backend._pages.pop(storage_key(hashes[3], "mamba"))
    assert cache.prefetch_from_storage("r1", RadixKey(A + [99])).issued and checked(cache)
    assert cache.check_prefetch_progress("r1") and cache.pop_prefetch_loaded_tokens("r1") == 8
    mamba = cache.by_name["mamba"]
    assert leaf(cache).length == 8 and leaf(cache).data[mamba.index].host_value is not None


def test_a_window_page_missing_at_read_time_discards_everything():
    cache = forget(insert(make(components=("full", "swa")), A))
    before = {name: cache.host.pool(name).available_size() for name in ("full", "swa")}
    real_get = cache.host.storage.backend.get

    def get(keys):
        return [None if k.endswith(".swa") else page for k, page in zip(keys, real_get(keys))]

    cache.host.storage.backend.get = get  # the window's pages were there at the query, not at the read
    assert cache.prefetch_from_storage("r1", RadixKey(A + [99])).issued
    assert cache.check_prefetch_progress("r1") and cache.pop_prefetch_loaded_tokens("r1") == 0
    assert len(cache.tree.nodes) == 1 and checked(cache)  # nothing placed
    assert {name: cache.host.pool(name).available_size() for name in ("full", "swa")} == before
    assert cache.host.storage.prefetch.outcomes["issued"] == 1


def test_mid_tree_a_span_shorter_than_the_window_stages_no_swa():
    """Two pages after a mid-tree anchor, a three-page window: its head would have to
    come from the device prefix, so no SWA is fetched (the root would stage the span)."""
    cache = make(components=("full", "swa"), transfers="held", threshold=4, window=12)
    insert(cache, A)
    forget(cache)
    insert(cache, A[:8])  # the first two pages are back, then on the host too
    for _ in range(2):
        cache.check_hicache_events()
    assert cache.prefetch_from_storage("r1", RadixKey(A + [99])).tokens == 8
    assert cache.host.storage.prefetch.ongoing["r1"].stagings == [] and checked(cache)
    cache.check_hicache_events()
    assert cache.check_prefetch_progress("r1") and cache.pop_prefetch_loaded_tokens("r1") == 8
    swa = cache.by_name["swa"]
    assert leaf(cache).data[swa.index].host_value is None and checked(cache)

    root_anchored = make(components=("full", "swa"), transfers="held", threshold=4, window=12)
    forget(insert(root_anchored, A[:8]))
    root_anchored.prefetch_from_storage("r2", RadixKey(A[:8] + [99]))
    assert [(s.name, s.pages) for s in root_anchored.host.storage.prefetch.ongoing["r2"].stagings] == [("swa", 2)]


def test_mamba_state_pages_round_trip():
    cache = insert(make(components=("full", "mamba")), A)
    pool = cache.host.pool("mamba")
    slot = leaf(cache).data[cache.by_name["mamba"].index].host_value
    page = pool.page_bytes(slot)
    spare = pool.allocator.alloc(1)
    assert pool.write_page(spare, page) and pool.page_bytes(spare) == page
    assert torch.equal(pool.ssm[int(spare[0])], pool.ssm[int(slot[0])])
    assert not pool.write_page(spare, page[:-1]) and not pool.write_page(spare, None)
    pool.free(spare)
