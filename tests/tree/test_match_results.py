"""MatchResult built by position on the match path agrees with the named tuple's own
constructors, field for field (a reordered or added field breaks these, not a match)."""

from __future__ import annotations

import torch

from cache.basics.params import MatchResult, tree_match_result, with_match_field


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

