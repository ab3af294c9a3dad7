"""The one tree walk (cache/tree/walk.py) that match_prefix, peek_match and insert
share: which nodes it passes, where it would split, and why it stopped."""

from __future__ import annotations

from cache import InsertParams, MatchPrefixParams, RadixKey, UnifiedRadixCache
from cache.basics.keys import TOKEN_BYTES
from cache.tree.walk import WalkStop, walk_key, walk_stop


def cache_with(*keys, page_size=1):
    cache = UnifiedRadixCache(components=("full",), kv_size=256, page_size=page_size, device="cpu")
    for key in keys:
        slots = cache.alloc_kv(len(key))
        cache.write_kv(slots, key)
        cache.insert(InsertParams(RadixKey(key), slots))
    return cache


def walk(cache, key):
    data = RadixKey(key).data
    aligned = data[: len(data) // (TOKEN_BYTES * cache.page_size) * TOKEN_BYTES * cache.page_size]
    nodes, cut = walk_key(cache.tree.root, aligned, None, cache.page_size)
    return [n.id for n in nodes], cut


def test_the_walk_passes_whole_nodes_and_says_where_to_split():
    cache = cache_with([1, 2, 3, 4], [1, 2, 5, 6])  # [1 2] above [3 4] and [5 6]
    ids_full, cut = walk(cache, [1, 2, 3, 4])
    assert len(ids_full) == 2 and cut is None
    ids, cut = walk(cache, [1, 2, 3])
    assert ids == ids_full and cut == 1  # ends one token into [3 4]
    ids, cut = walk(cache, [9])
    assert ids == [] and cut is None
    assert cache.tree.nodes.keys() >= set(ids_full)  # the walk changed nothing
    assert len(cache.tree.nodes) == 4


def test_pages_are_walked_whole():
    cache = cache_with([1, 2, 3, 4, 5, 6, 7, 8], page_size=4)
    ids, cut = walk(cache, [1, 2, 3, 4, 5, 6, 9, 9])
    assert len(ids) == 1 and cut == 4  # the second page differs: split after the first page
    ids, cut = walk(cache, [1, 2, 3, 4, 5])  # the partial page is not walked
    assert len(ids) == 1 and cut == 4


def test_stop_reasons():
    assert walk_stop(4, 4, partial=False) is WalkStop.KEY_ENDS
    assert walk_stop(2, 4, partial=False) is WalkStop.NO_CHILD
    assert walk_stop(2, 4, partial=True) is WalkStop.PARTIAL


def test_a_real_match_reports_its_walk():
    cache = cache_with([1, 2, 3, 4, 5, 6])
    leaf = cache.match_prefix(RadixKey([1, 2, 3, 4, 5, 6])).best_match_node
    result = cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 9])))  # splits the leaf after 4
    assert result.prefix_len == 4 and result.full_kv_hit_length == 4 and result.host_hit_length == 0
    assert result.last_device_node == result.best_match_node == result.last_host_node != leaf
    assert result.last_visited_node_id == result.best_match_node
    assert cache.match_prefix(RadixKey([7])).last_visited_node_id is None  # nothing walked: the root is not named


def test_match_end_hooks_see_where_a_match_ended_but_never_the_root():
    cache = UnifiedRadixCache(components=("full", "swa"), kv_size=64, sliding_window=2, device="cpu")
    slots = cache.alloc_kv(4)
    cache.write_kv(slots, [1, 2, 3, 4])
    cache.insert(InsertParams(RadixKey([1, 2, 3, 4]), slots))
    seen = []
    cache.tree._match_end_hooks.append(seen.append)  # the list the tree calls at every match's end
    hit = cache.match_prefix(RadixKey([1, 2, 3, 4]))
    cache.match_prefix(RadixKey([9, 9]))  # a miss: the match kept nothing
    assert [node.id for node in seen] == [hit.best_match_node]
