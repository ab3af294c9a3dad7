"""The tree side of a storage prefetch (cache/tree/prefetch_placement.py, SGLang 0.5.23's
``insert_host``): fetched host slots placed below the prefetch's anchor — matched nodes
kept (split where needed), write-through refills of nodes without a host copy, one new
host-only node for the rest, and the tail dropped below a node with no host copy."""

from __future__ import annotations

from cache import EvictParams, InsertParams, RadixKey, UnifiedRadixCache, check_invariants

A, B = list(range(1, 17)), list(range(101, 109))


def make(policy="write_through") -> UnifiedRadixCache:
    cache = UnifiedRadixCache(kv_size=64, page_size=4, device="cpu", hicache={"write_policy": policy, "load_back_threshold": 4})
    cache.tree.enable_page_hashes()
    return cache


def insert(cache, tokens):
    slots = cache.alloc_kv(len(tokens))
    cache.write_kv(slots, tokens)
    cache.insert(InsertParams(RadixKey(tokens), slots))


def fetched(cache, n):
    """Host slots as a prefetch would have filled them."""
    return cache.host.pool("full").allocator.alloc(n)


def node_of(cache, first_token):
    return next(n for n in cache.tree.iter_nodes() if n is not cache.tree.root and n.token_ids[0] == first_token)


def test_a_fetched_tail_becomes_a_host_only_node_below_a_backed_up_anchor():
    cache = make()
    insert(cache, A)  # write-through: A has a host copy
    anchor = node_of(cache, 1)
    free_before = cache.host.available_size()
    done = cache.tree.insert_host(anchor, RadixKey(B), fetched(cache, 8))
    assert done.prefix_len == 0 and not done.dropped and done.node.token_ids == B
    assert done.node.data[0].value is None and done.node.data[0].host_value.shape[0] == 8
    assert cache.host.available_size() == free_before - 8
    from cache.basics.page_hash import node_chain
    assert done.node.page_hashes == node_chain(done.node, 4) and done.node.page_hashes[0] != anchor.page_hashes[-1]
    assert check_invariants(cache) == []
    match = cache.match_prefix(RadixKey(A + B))
    assert match.device_prefix_len == 16 and match.host_hit_length == 8
    assert cache.load_back(RadixKey(A + B)).loaded == 8 and check_invariants(cache) == []


def test_fetched_pages_the_tree_already_holds_are_the_callers_and_a_partial_node_splits():
    cache = make()
    insert(cache, A)
    rows = fetched(cache, 24)
    done = cache.tree.insert_host(cache.tree.root, RadixKey(A[:8] + B), rows[:16])
    # A is split at 8; its 8 tokens already had a host copy: those fetched slots are the caller's
    assert done.prefix_len == 8 and done.node.token_ids == B and not done.refilled
    assert [n.length for n in cache.tree.root.children.values()] == [8]
    cache.host.pool("full").free(rows[:8])
    cache.host.pool("full").free(rows[16:])
    assert check_invariants(cache) == []


def test_write_through_selective_refills_a_device_node_and_drops_a_tail_below_an_unbacked_one():
    cache = make("write_through_selective")  # a node is backed up on its second hit
    insert(cache, A)
    assert node_of(cache, 1).data[0].host_value is None
    dropped = cache.tree.insert_host(node_of(cache, 1), RadixKey(B), rows := fetched(cache, 8))
    assert dropped.dropped and dropped.node is None and len(list(cache.tree.iter_nodes())) == 2
    cache.host.pool("full").free(rows)
    refill = cache.tree.insert_host(cache.tree.root, RadixKey(A + B), fetched(cache, 24))
    assert refill.refilled == (node_of(cache, 1),) and refill.prefix_len == 0 and refill.node.token_ids == B
    assert node_of(cache, 1).data[0].host_value.shape[0] == 16 and check_invariants(cache) == []
    cache.evict(EvictParams(num_tokens=16))  # both now demote instead of going
    assert cache.match_prefix(RadixKey(A + B)).host_hit_length == 24


def test_write_back_counts_every_matched_token_and_never_drops():
    cache = make("write_back")
    insert(cache, A)  # write-back: no host copy until device eviction
    done = cache.tree.insert_host(node_of(cache, 1), RadixKey(B), fetched(cache, 8))
    assert not done.dropped and done.node.token_ids == B and done.prefix_len == 0
    rows = fetched(cache, 16)
    again = cache.tree.insert_host(cache.tree.root, RadixKey(A), rows)
    assert again.prefix_len == 16 and again.node is None and not again.refilled  # write-back refills nothing
    cache.host.pool("full").free(rows)
    assert check_invariants(cache) == []
