"""The SWA model options of SGLang 0.5.23 (issue 28): a draft's wider window, matching
that a SWA tombstone does not gate, and the eager out-of-window frees switched off."""

from __future__ import annotations

import pytest

from cache.controller.unified_radix_cache import UnifiedRadixCache

from conftest import Checked


def swa(window: int = 4, **options) -> Checked:
    return Checked(components=("full", "swa"), page_size=1, kv_size=128, sliding_window=window, **options)


def checkpointed(c: Checked, tokens: list[int]) -> int:
    """Run a request over ``tokens``, checkpoint it (its out-of-window SWA slots go
    then), finish it; its window cursor at the checkpoint."""
    req = c.cache.new_request(tokens)
    c.cache.checkpoint(req)
    c.ok()
    cursor = req.swa_evicted_seqlen
    c.cache.release_kv_cache(req)
    c.ok()
    return cursor


@pytest.mark.parametrize("draft, cursor", [(0, 11), (2, 11), (8, 7)])
def test_the_tree_keeps_the_wider_of_window_and_draft_window(draft, cursor):
    c = swa(swa_draft_window=draft)
    assert checkpointed(c, list(range(1, 17))) == cursor  # 16 - 1 - max(window, draft)
    assert c.cache.evictable_size("swa") == 16 - cursor  # what the request kept live
    assert c.match(list(range(1, 17))).prefix_len == 16
    assert c.match(list(range(1, 13))).prefix_len == 0  # the tombstoned part above it ends no match


def test_an_ungated_tombstone_over_live_full_kv_ends_a_match():
    for gates, expected in ((True, [0, 0]), (False, [11, 8])):
        c = swa(swa_gates_prefix_match=gates)
        checkpointed(c, list(range(1, 17)))
        assert [c.match(list(range(1, n))).prefix_len for n in (13, 9)] == expected


def test_without_eager_frees_a_checkpoint_keeps_the_requests_out_of_window_slots():
    for frees, cursor, live in ((True, 11, 5), (False, 0, 16)):
        c = swa(swa_free_out_of_window=frees)
        assert checkpointed(c, list(range(1, 17))) == cursor
        assert c.cache.evictable_size("swa") == live
        # with every slot still live, the whole path is a match boundary again
        assert c.match(list(range(1, 9))).prefix_len == (0 if frees else 8)


@pytest.mark.parametrize("field, value", [("swa_draft_window", -1), ("swa_gates_prefix_match", 1),
                                          ("swa_free_out_of_window", "no")])
def test_bad_values_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        UnifiedRadixCache(components=("full", "swa"), sliding_window=4, **{field: value})


def test_the_verdict_names_an_accepted_ungated_tombstone():
    c = swa(swa_gates_prefix_match=False)
    checkpointed(c, list(range(1, 17)))
    tree, component = c.cache.tree, c.cache.by_name["swa"]
    chain = [tree.nodes[n.id] for n in sorted(c.cache.snapshot().non_root(), key=lambda n: len(n.path))]
    top = chain[0]
    assert top.data[component.index].value is None and top.data[0].value is not None  # a tombstone over live Full
    best, why = component.match_verdict(chain[:1])
    assert best == 0 and "swa_gates_prefix_match is off" in why
    # below it, a live run shorter than the window: the tombstone stays the answer
    best, why = component.match_verdict(chain)
    assert best == (len(chain) - 1 if chain[-1].length >= 4 else 0)
