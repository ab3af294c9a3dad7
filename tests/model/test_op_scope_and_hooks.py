"""``EventBus.op``: one scope per public op (nested ops keep the outer name and number,
request stamps nest and come back, an exception still closes the scope, nothing is
built unobserved); and the controller's hook table, built from what each component
class overrides."""

from __future__ import annotations

import pytest

from cache import EventBus, EventKind, EventLog, UnifiedRadixCache
from cache.components.base import TreeComponent
from cache.observe.events import UNOBSERVED, Cause
from cache.tree.hooks import HookTable, overriding


def emit(bus: EventBus) -> None:
    bus.emit(EventKind.ALLOC, "full", None, Cause.REQUEST, 1)


def test_nested_ops_keep_the_outer_name_and_number_and_restore_the_request():
    bus = EventBus()
    log = EventLog(bus)
    with bus.op("release_kv_cache", request="r1"):
        emit(bus)
        with bus.op("insert"):
            emit(bus)
        with bus.op("new_request", request="r2"):
            emit(bus)
        emit(bus)
    with bus.op("evict"):
        emit(bus)
    found = [(e.seq, e.op, e.request) for e in log.take()]
    assert found == [(1, "release_kv_cache", "r1"), (1, "release_kv_cache", "r1"),
                     (1, "release_kv_cache", "r2"), (1, "release_kv_cache", "r1"), (2, "evict", "")]


def test_for_request_stamps_without_an_op_of_its_own():
    bus = EventBus()
    log = EventLog(bus)
    with bus.for_request("r7"):
        with bus.op("alloc"):
            emit(bus)
        with bus.op("slide_window", request="r7"):
            emit(bus)
    assert [(e.seq, e.op, e.request) for e in log.take()] == [(1, "alloc", "r7"), (2, "slide_window", "r7")]
    assert bus.request == ""


def test_a_raising_op_still_closes_its_scope():
    bus = EventBus()
    log = EventLog(bus)
    with pytest.raises(RuntimeError):
        with bus.op("new_request", request="r1"):
            raise RuntimeError("refused")
    with bus.op("match_prefix"):
        emit(bus)
    assert [(e.seq, e.op, e.request) for e in log.take()] == [(2, "match_prefix", "")]


def test_an_unobserved_bus_hands_out_one_shared_scope_and_counts_nothing():
    bus = EventBus()
    assert bus.op("insert") is UNOBSERVED and bus.for_request("r1") is UNOBSERVED
    with bus.op("insert", request="r1"):
        pass
    assert (bus.seq, bus.request) == (0, "")


@pytest.mark.parametrize("components", [("full",), ("full", "swa"), ("full", "mamba"), ("full", "swa", "mamba")])
def test_the_hook_table_lists_exactly_the_overriding_components(components):
    cache = UnifiedRadixCache(components=components, page_size=1, kv_size=32, sliding_window=4, swa_kv_size=32,
                              mamba_size=4, device="cpu")
    table = cache.hooks
    names = lambda found: [c.name for c in found]  # noqa: E731
    assert names(table.kv_peers) == [n for n in components if n == "swa"]
    assert names(table.own_pools) == [n for n in components if n != "full"]
    assert names(table.finalize_match_in_cache) == [n for n in components if n == "mamba"]
    assert names(table.pinned_by_lock) == list(components)
    assert names(table.free_out_of_window_slots) == [n for n in components if n == "swa"]
    assert names(table.cleanup_after_caching_req) == [n for n in components if n != "full"]
    for hook in ("reserve_request", "admit_request", "advance_request", "release_request", "slots_for_request"):
        assert names(getattr(table, hook)) == [n for n in components if n == "mamba"], hook
    assert HookTable.of(cache.components) == table  # a pure function of the component classes


def test_a_component_without_an_override_is_left_out():
    class Quiet(TreeComponent):
        name = "quiet"

    class Loud(Quiet):
        def admit_request(self, req) -> None:
            pass

    quiet, loud = Quiet(None, 0), Loud(None, 1)
    assert overriding([quiet, loud], "admit_request") == (loud,)
    assert overriding([quiet, loud], "release_request") == ()
