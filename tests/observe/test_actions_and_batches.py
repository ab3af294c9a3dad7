"""Typed deferred actions (one frozen class per kind, dispatched on the type) and the
``EvictionBatch`` that carries one eviction's bookkeeping."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cache import Cause, EvictParams, InsertParams, RadixKey, UnifiedRadixCache
from cache.components.swa.actions import RebuildSWA, RecoverLockedSWA
from cache.observe.actions import ComponentAction, FreeDeviceKV, FreeDeviceKVFullOnly
from cache.observe.eviction_batch import EvictionBatch

SLOTS = torch.arange(4, dtype=torch.int64)


def _swa_cache() -> UnifiedRadixCache:
    return UnifiedRadixCache(components=("full", "swa"), page_size=1, kv_size=32, sliding_window=4, device="cpu")


def _insert(cache: UnifiedRadixCache, tokens: list[int]) -> None:
    slots = cache.alloc_kv(len(tokens))
    cache.write_kv(slots, tokens)
    cache.insert(InsertParams(RadixKey(tokens), slots))


ALL = [
    FreeDeviceKV([SLOTS], 3),
    FreeDeviceKVFullOnly([SLOTS, SLOTS], None, Cause.TAIL),
    RebuildSWA(3, SLOTS),
    RecoverLockedSWA(3, SLOTS, SLOTS),
]


@pytest.mark.parametrize("action", ALL, ids=lambda a: type(a).__name__)
def test_each_action_is_frozen_and_describes_itself_in_one_line(action):
    line = action.describe()
    assert line and "\n" not in line
    assert ("8" if type(action) is FreeDeviceKVFullOnly else "4") in line
    with pytest.raises(dataclasses.FrozenInstanceError):
        action.node = 9


def test_component_actions_are_barriers_and_frees_are_deferrable():
    assert [a.deferrable for a in ALL] == [True, True, False, False]
    assert all(a.component == "swa" for a in ALL if isinstance(a, ComponentAction))


def test_swa_insert_hands_its_rebuilds_to_the_component_by_type():
    cache = _swa_cache()
    swa = cache.by_name["swa"]
    seen = []
    apply = swa.apply_action
    swa.apply_action = lambda action: (seen.append(action), apply(action))
    _insert(cache, list(range(1, 9)))
    assert seen and all(type(a) is RebuildSWA for a in seen)
    assert sorted(int(a.source.shape[0]) for a in seen) == [4, 4]  # the leaf window cap split it


def test_a_component_refuses_an_action_it_does_not_know():
    cache = _swa_cache()
    with pytest.raises(AssertionError, match="unknown action"):
        cache.by_name["full"].apply_action(RebuildSWA(0, SLOTS))


def test_a_batch_counts_what_it_frees_and_forgets_drained_values():
    batch = EvictionBatch(("full", "swa"), Cause.CAPACITY)
    batch.walk("full", 6)
    batch.free("full", SLOTS, 4)
    batch.free("full", SLOTS[:2], 2)
    assert (batch.trigger, batch.need, batch.counts) == ("full", 6, {"full": 6, "swa": 0})
    assert len(batch.take_frees("full")) == 2 and batch.take_frees("full") == []
    assert batch.counts["full"] == 6  # draining keeps the counts
    assert "capacity" in repr(batch)


def test_an_eviction_result_is_its_batch_counts():
    cache = _swa_cache()
    _insert(cache, list(range(1, 9)))
    free = cache.available_size("full")
    result = cache.evict(EvictParams(num_tokens=8))
    assert (result.num_tokens_evicted, result.swa_num_tokens_evicted) == (8, 8)
    assert cache.available_size("full") == free + 8


def test_an_observed_insert_reports_each_action_before_its_effects():
    from cache import EventKind, EventLog
    cache = _swa_cache()
    _insert(cache, list(range(1, 9)))
    log = EventLog(cache.events)
    _insert(cache, list(range(1, 9)))  # all duplicates: one FreeDeviceKV per node (the window cap split it)
    kinds = [(e.kind, e.component, e.node, e.tokens) for e in log.events if e.kind in (EventKind.ACTION, EventKind.FREE)]
    assert kinds == [(EventKind.ACTION, "full", 2, 4), (EventKind.FREE, "swa", None, 4), (EventKind.FREE, "full", 2, 4),
                     (EventKind.ACTION, "full", 1, 4), (EventKind.FREE, "swa", None, 4), (EventKind.FREE, "full", 1, 4)]
    action = next(e for e in log.events if e.kind is EventKind.ACTION)
    assert action.detail.startswith("FreeDeviceKV:") and action.cause is Cause.DUPLICATE


def test_a_swa_rebuild_is_an_action_event_and_unobserved_caches_emit_none():
    from cache import EventKind, EventLog
    cache = _swa_cache()
    log = EventLog(cache.events)
    _insert(cache, list(range(1, 9)))
    rebuilds = [e for e in log.events if e.kind is EventKind.ACTION]
    assert [(e.component, e.cause, e.tokens) for e in rebuilds] == [("swa", Cause.WINDOW, 4)] * 2
    assert all(e.detail.startswith("RebuildSWA:") for e in rebuilds)
    log.close()
    seen = len(log.events)
    _insert(cache, list(range(20, 24)))
    assert not cache.events.enabled and len(log.events) == seen


def test_why_an_action_names_the_tree_decision_and_its_first_effect():
    from workbench.model.timeline.runner import Runner
    from workbench.model.scenarios.scenario import scenario_from_records
    from workbench.model.debugging.why import why_event
    header = {"schema": 1, "scenario": {"name": "t"}, "config": {"components": ["full"], "kv_size": 32}}
    steps = [{"op": "insert", "key": [1, 2, 3, 4]}, {"op": "insert", "key": [1, 2, 3, 4]}]
    timeline = Runner(scenario_from_records(header, steps)).run()
    events = timeline.records[1].events
    k = next(i for i, e in enumerate(events) if e.kind.value == "action")
    answer = why_event(timeline, 2, k)
    assert "decided this during insert" in answer.text() and "FreeDeviceKV" in answer.text()
    assert any(x.startswith("its first effect: ") and "free full" in x for x in answer.lines)
