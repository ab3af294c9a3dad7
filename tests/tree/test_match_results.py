"""MatchResult built by position on the match path agrees with the named tuple's own
constructors, field for field (a reordered or added field breaks these, not a match)."""

from __future__ import annotations

import torch

from cache import InsertParams, MatchPrefixParams, RadixKey, UnifiedRadixCache
from cache.basics.params import MatchResult, tree_match_result, with_match_field


def cache_with(tokens):
    cache = UnifiedRadixCache(components=("full",), kv_size=64, device="cpu")
    slots = cache.alloc_kv(len(tokens))
    cache.write_kv(slots, tokens)
    cache.insert(InsertParams(RadixKey(tokens), slots))
    return cache


def test_the_tree_result_is_the_keyword_result():
    slots = torch.arange(4)
    built = tree_match_result(slots, 7, 9, 3, 12, 11)
    named = MatchResult(slots, 7, 9, 9, 3, full_kv_hit_length=12, last_visited_node_id=11)
    assert type(built) is MatchResult and built == named and built._asdict() == named._asdict()
    assert tree_match_result(slots, 1, 1, 0, 0, None).last_visited_node_id is None


def test_setting_one_field_is_replace():
    base = tree_match_result(torch.arange(2), 5, 5, 0, 2, 5)
    for k, name in enumerate(MatchResult._fields[1:], 1):
        assert with_match_field(base, name, 1000 + k) == base._replace(**{name: 1000 + k})


def test_a_real_match_reports_its_walk():
    cache = cache_with([1, 2, 3, 4, 5, 6])
    leaf = cache.match_prefix(RadixKey([1, 2, 3, 4, 5, 6])).best_match_node
    result = cache.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4, 9])))  # splits the leaf after 4
    assert result.prefix_len == 4 and result.full_kv_hit_length == 4 and result.host_hit_length == 0
    assert result.last_device_node == result.best_match_node == result.last_host_node != leaf
    assert result.last_visited_node_id == result.best_match_node
    assert cache.match_prefix(RadixKey([7])).last_visited_node_id is None  # nothing walked: the root is not named
