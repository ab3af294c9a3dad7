"""MatchResult built by position on the match path agrees with the named tuple's own
constructors, field for field (a reordered or added field breaks these, not a match)."""

from __future__ import annotations

import pytest
import torch

from cache.basics.params import MatchResult, match_field_position, tree_match_result, with_match_field


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


def test_field_positions_are_the_named_tuples():
    assert [match_field_position(name) for name in MatchResult._fields] == list(range(len(MatchResult._fields)))
    with pytest.raises(KeyError):
        match_field_position("no_such_field")


@pytest.mark.parametrize("walked, device, host, expected", [
    (300, 0, 0, (256, 288)),  # a walk that kept nothing: both report its length on their grid
    (300, 256, 0, (None, 288)),  # 256 on the 256 grid does not pass the device prefix; 288 on 32 does
    (300, 256, 32, (None, None)),  # the host hit counts too: 288 does not pass 256 + 32
    (31, 0, 0, (None, None)),  # less than a grid step: nothing to report
])
def test_branching_fields_are_the_walk_on_each_grid_past_what_the_result_reports(walked, device, host, expected):
    grids = ((match_field_position("mamba_branching_seqlen"), 256), (match_field_position("swa_branching_seqlen"), 32))
    built = tree_match_result(torch.arange(device), 4, 4, host, walked, 4, device, grids)
    assert (built.mamba_branching_seqlen, built.swa_branching_seqlen) == expected
    named = MatchResult(torch.arange(device), 4, 4, 4, host, full_kv_hit_length=walked, last_visited_node_id=4,
                        mamba_branching_seqlen=expected[0], swa_branching_seqlen=expected[1])
    assert built._asdict().keys() == named._asdict().keys()
    assert all(a is b or a == b for a, b in zip(built[1:], named[1:]))
