"""Exact causes in the event stream: which component's eviction chose a node (the rest
is a cascade from it), what that eviction was asked to free, which request a call ran
for, and each component's verdict on where a match ends."""

from __future__ import annotations

import pytest

from cache import Cause, Event, EventKind, EventLog, EvictParams, InsertParams, RadixKey, UnifiedRadixCache
from cache.observe.eviction_batch import EvictionBatch
from workbench.model.timeline.runner import Runner
from workbench.model.scenarios.scenario import scenario_from_records
from workbench.model.scenarios.workload import random_records

HYBRID = {"components": ["full", "swa", "mamba"], "page_size": 1, "kv_size": 64, "sliding_window": 4,
          "swa_kv_size": 64, "mamba_size": 16}


def run(config: dict, *steps: dict):
    """Run the steps (invariants checked after each); every step must pass."""
    header = {"schema": 1, "scenario": {"name": "t"}, "config": config}
    timeline = Runner(scenario_from_records(header, list(steps))).run()
    failed = [(r.index, r.error, r.violations, r.failures) for r in timeline.records if r.error or not r.passed]
    assert not failed, failed
    return timeline


def events(timeline, step: int, kind: EventKind | None = None) -> list[Event]:
    found = timeline.records[step - 1].events
    return [e for e in found if kind is None or e.kind is kind]


def shape(found) -> set[tuple]:
    return {(e.component, e.cause, e.detail) for e in found}


def verdicts(timeline, step: int) -> dict[str, Event]:
    found = events(timeline, step, EventKind.VERDICT)
    assert len(found) == len({e.component for e in found}), found  # one per component
    return {e.component: e for e in found}


# ---- eviction: trigger, cascade, need ---------------------------------------------------------
def test_swa_eviction_of_a_leaf_reports_full_and_mamba_as_a_cascade_from_swa():
    timeline = run(HYBRID, {"op": "insert", "key": list(range(1, 11))},
                   {"op": "insert", "key": [1, 2, 3, 4, 5, 6, 7, 8, 11, 12]},
                   {"op": "evict", "swa": 4})
    deleted = events(timeline, 3, EventKind.DELETE)
    assert len(deleted) == 1 and deleted[0].cause is Cause.CAPACITY
    leaf = deleted[0].node
    on_leaf = [e for e in events(timeline, 3, EventKind.EVICT) if e.node == leaf]
    assert shape(on_leaf) == {("swa", Cause.CAPACITY, "need 4"), ("full", Cause.CASCADE, "from swa"),
                              ("mamba", Cause.CASCADE, "from swa")}
    assert [e.tokens for e in on_leaf if e.component == "full"] == [2]


def test_full_eviction_reports_the_other_components_as_a_cascade_from_full():
    timeline = run(HYBRID, {"op": "insert", "key": [1, 2, 3, 4, 5, 6]}, {"op": "evict", "full": 2})
    assert shape(events(timeline, 2, EventKind.EVICT)) == {
        ("full", Cause.CAPACITY, "need 2"), ("swa", Cause.CASCADE, "from full"), ("mamba", Cause.CASCADE, "from full")}


def test_a_capacity_tombstone_carries_its_need_and_its_cascade_names_it():
    timeline = run(HYBRID, {"op": "insert", "key": list(range(1, 11))},
                   {"op": "insert", "key": [1, 2, 3, 4, 5, 6]},  # a state on the internal [1..6]
                   {"op": "match", "key": list(range(1, 11))},  # the leaf [7..10] is now the most recent
                   {"op": "evict", "swa": 3})
    tomb = events(timeline, 4, EventKind.TOMBSTONE)
    assert shape(tomb) == {("swa", Cause.CAPACITY, "need 3")}
    cascade = events(timeline, 4, EventKind.CASCADE)
    assert shape(cascade) == {("mamba", Cause.CASCADE, "from swa")} and cascade[0].node == tomb[0].node


def test_allocation_driven_eviction_names_the_shortfall_and_the_request():
    config = {"components": ["full"], "page_size": 1, "kv_size": 8}
    timeline = run(config, {"op": "insert", "key": [1, 2, 3, 4, 5, 6]},
                   {"op": "req_prefill", "req": "r1", "tokens": [9, 9, 9, 9, 9]})
    (evict,) = events(timeline, 2, EventKind.EVICT)
    assert (evict.cause, evict.detail, evict.op, evict.request) == (Cause.CAPACITY, "need 3", "new_request", "r1")


def test_an_emptied_ancestor_reports_its_data_and_its_removal_as_cleanup():
    """No op leaves an internal node without Full KV today, so make one by hand and
    check what the ancestor walk reports when it removes it."""
    cache = UnifiedRadixCache(components=("full", "swa"), page_size=1, kv_size=32, sliding_window=4, device="cpu")
    log = EventLog(cache.events)
    slots = cache.alloc_kv(8)
    cache.write_kv(slots, list(range(1, 9)))
    cache.insert(InsertParams(RadixKey(list(range(1, 9))), slots))
    leaf = cache.match_prefix(RadixKey(list(range(1, 9)))).last_device_node
    upper = cache.tree.nodes[leaf].parent
    assert upper is not cache.tree.root and upper.data[1].value is not None
    upper.data[0].value = None  # the Full side of the upper node is gone
    log.take()
    batch = EvictionBatch(("full", "swa"), Cause.CAPACITY, trigger="full", need=4)
    cache.tree.delete_leaf(cache.tree.nodes[leaf], batch)
    found = log.take()
    on_upper = [(e.kind, e.component, e.cause, e.detail) for e in found if e.node == upper.id]
    assert on_upper == [(EventKind.EVICT, "swa", Cause.CLEANUP, f"after child #{leaf}"),
                        (EventKind.DELETE, None, Cause.CLEANUP, f"after child #{leaf}")]
    assert [e.cause for e in found if e.node == leaf and e.kind is EventKind.DELETE] == [Cause.CAPACITY]


def test_an_swa_recovery_reports_that_full_took_the_incoming_slots():
    config = {**HYBRID, "components": ["full", "swa"]}
    timeline = run(config, {"op": "insert", "key": list(range(1, 13))}, {"op": "match", "key": [1, 2, 3, 4, 99]},
                   {"op": "evict", "swa": 4}, {"op": "insert", "key": list(range(1, 13))})
    (tomb,) = events(timeline, 3, EventKind.TOMBSTONE)
    sets = [(e.component, e.node) for e in events(timeline, 4, EventKind.SET)]
    assert ("full", tomb.node) in sets and ("swa", tomb.node) in sets


# ---- request context --------------------------------------------------------------------------
def test_every_event_of_a_request_call_carries_its_request_id():
    timeline = run(HYBRID, {"op": "insert", "key": [1, 2, 3, 4]},
                   {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4, 5, 6]},
                   {"op": "req_decode", "req": "r1", "tokens": [7, 8, 9, 10, 11], "slide_window": True},
                   {"op": "req_chunk", "req": "r1"},
                   {"op": "match", "key": [1, 2, 3]},
                   {"op": "req_finish", "req": "r1"})
    for step in (2, 3, 4, 6):
        found = events(timeline, step)
        assert found and {e.request for e in found} == {"r1"}, step
    assert {e.op for e in events(timeline, 3)} == {"alloc", "slide_window"}  # ops keep their own names
    assert {e.request for e in events(timeline, 1) + events(timeline, 5)} == {""}


def test_event_keeps_its_positional_fields():
    event = Event(3, "evict", EventKind.EVICT, "swa", 7, Cause.CAPACITY, 4, "need 4")
    assert event.request == "" and "<" not in event.describe()
    tagged = Event(3, "alloc", EventKind.EVICT, "swa", 7, Cause.CAPACITY, 4, "need 4", "r1")
    assert "<r1>" in tagged.describe()


# ---- verdicts -----------------------------------------------------------------------------------
FULL = {"components": ["full"], "page_size": 1, "kv_size": 64}


def test_full_verdicts_say_what_stopped_the_walk():
    timeline = run(FULL, {"op": "insert", "key": [1, 2, 3, 4]},
                   {"op": "match", "key": [1, 2, 3, 4]},
                   {"op": "match", "key": [1, 2, 3, 4, 7]},
                   {"op": "match", "key": [1, 2, 9]},
                   {"op": "match", "key": [1]},
                   {"op": "match", "key": [5]})
    leaf = verdicts(timeline, 2)["full"].node
    assert (verdicts(timeline, 2)["full"].tokens, verdicts(timeline, 2)["full"].detail) == (4, "key ends")
    assert verdicts(timeline, 3)["full"].detail == f"no child for token 7 under node #{leaf}"
    diverged = verdicts(timeline, 4)["full"]
    assert diverged.detail == f"node #{leaf} matched 2 of 4 tokens (split needed)" and diverged.tokens == 2
    assert diverged.node == events(timeline, 4, EventKind.SPLIT)[0].node  # the new upper part ends the match
    upper = diverged.node  # [1 2]
    assert verdicts(timeline, 5)["full"].detail == f"key ends inside node #{upper} (1 of 2 tokens, split needed)"
    root = timeline.initial.root_id
    assert verdicts(timeline, 6)["full"].detail == f"no child for token 5 under node #{root}"


def test_full_verdict_names_an_unaligned_tail():
    config = {"components": ["full"], "page_size": 4, "kv_size": 64}
    timeline = run(config, {"op": "insert", "key": list(range(1, 9))},
                   {"op": "match", "key": list(range(1, 12))},
                   {"op": "match", "key": [1, 2, 3]})
    whole = verdicts(timeline, 2)["full"]
    assert (whole.tokens, whole.detail) == (8, "unaligned tail of 3 tokens (page 4)")
    assert verdicts(timeline, 3)["full"].detail == "unaligned tail of 3 tokens (page 4)"


SWA = {"components": ["full", "swa"], "page_size": 1, "kv_size": 32, "sliding_window": 4, "swa_kv_size": 24}


def test_swa_verdicts_name_the_tombstone_and_the_short_window():
    timeline = run(SWA, {"op": "insert", "key": list(range(1, 13))},
                   {"op": "match", "key": [1, 2, 3, 4, 99]},
                   {"op": "evict", "swa": 4},
                   {"op": "match", "key": list(range(1, 11))},
                   {"op": "match", "key": list(range(1, 9))},
                   {"op": "match", "key": list(range(1, 13))})
    (tomb,) = events(timeline, 3, EventKind.TOMBSTONE)
    short = verdicts(timeline, 4)
    assert short["full"].tokens == 10
    assert short["swa"].detail == f"window run of 2 tokens since tombstone #{tomb.node} < sliding_window 4"
    assert short["swa"].tokens == 4 == timeline.records[3].result["prefix_len"]
    ends_on_gap = verdicts(timeline, 5)["swa"]
    assert (ends_on_gap.detail, ends_on_gap.tokens) == (f"tombstone at node #{tomb.node}", 4)
    whole = verdicts(timeline, 6)["swa"]
    assert whole.detail == f"window run of 4 tokens since tombstone #{tomb.node} >= sliding_window 4"
    assert whole.tokens == 12 and verdicts(timeline, 2)["swa"].detail == "no tombstone on the path"


MAMBA = {"components": ["full", "mamba"], "page_size": 1, "kv_size": 64, "mamba_size": 16}


def test_mamba_verdicts_name_the_nearest_state_and_the_nodes_without_one():
    timeline = run(MAMBA, {"op": "insert", "key": [1, 2, 3, 4, 5, 6]},
                   {"op": "insert", "key": list(range(1, 11))},
                   {"op": "match", "key": [1, 2, 3, 4, 5, 6, 7, 8]},
                   {"op": "match", "key": list(range(1, 11))},
                   {"op": "evict", "mamba": 2},
                   {"op": "match", "key": [1, 2, 3, 4, 5, 6, 99]})
    first = verdicts(timeline, 1)  # an insert makes no match
    assert first == {}
    stopped = verdicts(timeline, 3)
    upper = stopped["full"].node  # [7 8], split off [7..10]
    state = stopped["mamba"].node
    assert stopped["mamba"].detail == f"nearest Mamba state at node #{state} (6 tokens); node #{upper} below it holds none"
    assert stopped["mamba"].tokens == 6 == timeline.records[2].result["prefix_len"]
    assert verdicts(timeline, 4)["mamba"].detail.startswith("Mamba state at the walk's end")
    assert verdicts(timeline, 6)["mamba"].detail == f"no Mamba state on the path; node #{state} holds none"
    assert verdicts(timeline, 6)["mamba"].tokens == 0


def test_a_prefill_match_reports_its_verdicts():
    timeline = run(MAMBA, {"op": "insert", "key": [1, 2, 3, 4]}, {"op": "req_prefill", "req": "r", "tokens": [1, 2, 3, 4, 5]})
    found = verdicts(timeline, 2)
    assert set(found) == {"full", "mamba"} and {e.request for e in found.values()} == {"r"}
    assert found["full"].detail == "no child for token 5 under node #" + str(found["full"].node)


@pytest.mark.parametrize("components", [("full",), ("full", "swa"), ("full", "mamba")])
def test_verdicts_agree_with_the_match_results(components):
    """With one validating component (or none), its verdict is the match's answer."""
    records = list(random_records(400, 3, components))
    timeline = Runner(scenario_from_records(records[0], records[1:]), checks=False).run()
    checked = 0
    for record in timeline.records:
        found = {e.component: e for e in record.events if e.kind is EventKind.VERDICT}
        if record.step.op in ("match", "req_prefill") and record.result is not None:
            decider = found[components[-1]]
            assert decider.tokens == record.result["prefix_len"], (record.index, decider)
            assert found["full"].tokens >= decider.tokens
            checked += 1
    assert checked > 50


# ---- unobserved: no cost ------------------------------------------------------------------------
def test_no_verdicts_or_request_tags_are_built_without_an_observer(monkeypatch):
    import cache.tree.core as tree_core
    from cache.observe.events import EventBus, OpScope

    def refuse(*args, **kwargs):
        raise AssertionError("called without an observer")

    for name in ("emit", "begin", "enter_request"):
        monkeypatch.setattr(EventBus, name, refuse)
    monkeypatch.setattr(OpScope, "__enter__", refuse)  # bus.op() hands out the shared no-op instead
    monkeypatch.setattr(tree_core, "emit_verdicts", refuse)
    cache = UnifiedRadixCache(**HYBRID, device="cpu")
    slots = cache.alloc_kv(6)
    cache.write_kv(slots, [1, 2, 3, 4, 5, 6])
    cache.insert(InsertParams(RadixKey([1, 2, 3, 4, 5, 6]), slots, cache.alloc_mamba_state([1, 2, 3, 4, 5, 6])))
    cache.match_prefix(RadixKey([1, 2, 3, 9]))
    req = cache.new_request([1, 2, 3, 4, 5, 6, 7])
    cache.extend_request(req, [8, 9, 10], slide=True)
    cache.checkpoint(req)
    cache.release_kv_cache(req)
    cache.evict_for_alloc(EvictParams(num_tokens=60))
    assert cache.events.request == ""
