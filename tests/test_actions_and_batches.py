"""Typed deferred actions (one frozen class per kind, dispatched on the type) and the
``EvictionBatch`` that carries one eviction's bookkeeping."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cache import Cause, EvictParams, InsertParams, RadixKey, UnifiedRadixCache
from cache.actions import ComponentAction, FreeDeviceKV, FreeDeviceKVFullOnly, RebuildSWA, RecoverLockedSWA
from cache.eviction import EvictionBatch

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
