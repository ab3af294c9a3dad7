"""A checked loop (``urc run``, the fuzzer, ``Runner.run``) sets the collector up for a
long run of small steps and leaves it as it found it."""

from __future__ import annotations

import gc

from workbench.model.timeline.runner import YOUNG_COLLECTION, checked_loop


def test_a_checked_loop_collects_the_young_less_often_and_leaves_the_collector_as_it_was():
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    young = max(before[0], YOUNG_COLLECTION)
    with checked_loop():
        assert gc.get_threshold() == (young, *before[1:])
        assert gc.get_freeze_count() > frozen  # what existed before the loop is out of the collector's sight
        with checked_loop():  # a nested loop leaves the outer one in charge
            assert gc.get_threshold() == (young, *before[1:])
        assert gc.get_threshold() == (young, *before[1:])
    assert gc.get_threshold() == before
