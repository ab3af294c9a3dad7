"""``workbench.model.debugging.why``: the sentences name the right step, op, request, component
and cascade, locks are traced to the steps that still hold them, and a node's story
reads only the steps that concern it."""

from __future__ import annotations

import re

import pytest

from cache import EventKind
from workbench.model.timeline.runner import Runner
from workbench.model.scenarios.scenario import scenario_from_records
from workbench.model.debugging.why import Explanation, node_steps, why_event, why_match, why_node
from workbench.model.scenarios.workload import random_records

HYBRID = {"components": ["full", "swa", "mamba"], "page_size": 1, "kv_size": 64, "sliding_window": 4,
          "mamba_size": 16}


def run(config: dict, *steps: dict):
    header = {"schema": 1, "scenario": {"name": "t"}, "config": config}
    timeline = Runner(scenario_from_records(header, list(steps))).run()
    assert timeline.passed and not any(r.error for r in timeline.records)
    return timeline


def event_index(timeline, step: int, kind: EventKind, component: str | None = None) -> int:
    events = timeline.records[step - 1].events
    return next(k for k, e in enumerate(events) if e.kind is kind and (component is None or e.component == component))


def line(answer: Explanation, starts: str) -> str:
    found = [x for x in answer.lines if x.startswith(starts)]
    assert len(found) == 1, (starts, answer.text())
    return found[0]


@pytest.fixture(scope="module")
def tombstoned():
    """r1's admission is 2 SWA slots short: the SWA LRU walk tombstones the internal
    node [1..6] (node #2) at step 4 and the cascade takes its Mamba state."""
    return run({**HYBRID, "swa_kv_size": 16},
               {"op": "insert", "key": list(range(1, 11))},
               {"op": "insert", "key": [1, 2, 3, 4, 5, 6]},
               {"op": "match", "key": list(range(1, 11))},
               {"op": "req_prefill", "req": "r1", "tokens": list(range(20, 28))})


@pytest.fixture(scope="module")
def deleted():
    """r1's admission is 4 SWA slots short: the SWA LRU walk deletes the leaf [9..12]
    (node #1) whole at step 3; Full and Mamba go with it."""
    return run({**HYBRID, "swa_kv_size": 12},
               {"op": "insert", "key": list(range(1, 13))},
               {"op": "insert", "key": list(range(1, 9))},
               {"op": "req_prefill", "req": "r1", "tokens": [20, 21, 22, 23]})


# ---- why_node -------------------------------------------------------------------------------------
def test_a_tombstone_names_its_step_request_need_choice_and_cascade(tombstoned):
    answer = why_node(tombstoned, 4, 2)
    swa = line(answer, "SWA: none")
    assert "tombstoned at step 4 (req_prefill r1, line 5)" in swa
    assert "SWA capacity eviction needed 2 slots (an allocation in new_request fell short)" in swa
    assert "least recently used unlocked SWA holder" in swa and "not an evictable leaf" in swa
    assert swa.endswith("the cascade took its Mamba state")
    mamba = line(answer, "Mamba: none")
    assert "evicted at step 4 (req_prefill r1, line 5): a cascade from SWA's tombstone" in mamba
    assert line(answer, "Full: 6 tokens").endswith("split off at step 1 (insert, line 2)")
    assert line(answer, "created").startswith("created at step 1 (insert, line 2) by splitting node #1")
    assert answer.steps == (1, 4)


def test_before_the_eviction_the_same_node_still_has_its_data(tombstoned):
    answer = why_node(tombstoned, 3, 2)
    assert line(answer, "SWA:").startswith("SWA: 6 tokens of KV")
    assert "set at step 2 (insert, line 3)" in line(answer, "Mamba:")
    assert 4 not in answer.steps


def test_a_node_deleted_whole_names_the_trigger_and_what_went_with_it(deleted):
    answer = why_node(deleted, 3, 1)
    assert answer.title == "node #1 after step 3: not in the tree"
    assert line(answer, "created").startswith("created at step 1 (insert, line 2): a new leaf of 12 tokens")
    gone = line(answer, "deleted")
    assert gone.startswith("deleted at step 3 (req_prefill r1, line 4): SWA capacity eviction needed 4 slots")
    assert "an evictable leaf, so it was deleted whole" in gone
    assert gone.endswith("the cascade took its Full KV (4 tokens) and Mamba state")
    assert why_node(deleted, 2, 1).title == "node #1 after step 2"  # still there before


def test_splits_that_cut_a_node_are_listed_in_order():
    timeline = run({"components": ["full"], "kv_size": 64},
                   {"op": "insert", "key": [1, 2, 3, 4, 5, 6]},
                   {"op": "match", "key": [1, 2, 9]},
                   {"op": "match", "key": [1, 2, 3, 4, 9]})
    answer = why_node(timeline, 3, 1)
    splits = [x for x in answer.lines if x.startswith("split")]
    assert splits == ["split at step 2 (match, line 3): node #2 took its first 2 tokens",
                      "split at step 3 (match, line 4): node #3 took its first 2 tokens"]
    assert line(answer, "Full:").startswith("Full: 2 tokens of KV, written by the insert that created it at step 1")
    # a split of the node above (not of this one) is not this node's
    assert not [x for x in why_node(timeline, 3, 2).lines if x.startswith("split")]


LOCKS = {"components": ["full"], "kv_size": 64}


def test_locks_are_traced_to_the_steps_that_still_hold_them():
    """L1 and L2 lock the same node, then L1 is released: the lock left is L2's (a
    plain count would credit the older one)."""
    timeline = run(LOCKS, {"op": "insert", "key": [1, 2, 3, 4]},
                   {"op": "match", "key": [1, 2, 3, 4], "as": "m"},
                   {"op": "lock", "match": "m", "as": "L1"},
                   {"op": "lock", "match": "m", "as": "L2"},
                   {"op": "unlock", "lock": "L1"},
                   {"op": "match", "key": [1, 2, 9]})
    held = line(why_node(timeline, 5, 1), "Full lock_ref")
    assert held == "Full lock_ref 1: held by lock L2 since step 4 (lock m as L2, line 5)"
    # the split at step 6 copies the lock to the new upper node, and it is traced there too
    upper = line(why_node(timeline, 6, 2), "Full lock_ref")
    assert upper == "Full lock_ref 1: held by lock L2 since step 4 (lock m as L2, line 5)"
    assert line(why_node(timeline, 2, 1), "never locked").startswith("never locked")


def test_a_request_lock_and_its_release():
    timeline = run(LOCKS, {"op": "insert", "key": [1, 2, 3, 4]},
                   {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4, 5]},
                   {"op": "req_finish", "req": "r1"})
    assert line(why_node(timeline, 2, 1), "Full lock_ref") == (
        "Full lock_ref 1: held by request r1 since step 2 (req_prefill r1, line 3)")
    assert line(why_node(timeline, 3, 1), "Full unlocked") == "Full unlocked; last released at step 3 (req_finish r1, line 4)"


def test_bad_steps_and_unknown_nodes_are_one_line_value_errors(deleted):
    for step in (-1, 4, "2", None):
        with pytest.raises(ValueError, match=r"out of range: this timeline has steps 0\.\.3"):
            why_node(deleted, step, 1)
    with pytest.raises(ValueError, match="unknown node 99: no step of this timeline names it"):
        why_node(deleted, 3, 99)
    later = max(deleted.final.records)
    with pytest.raises(ValueError, match=f"node {later} is not in the tree after step 0: it first appears at step"):
        why_node(deleted, 0, later)
    assert why_node(deleted, 0, 0).lines[0].startswith("the root")


# ---- why_match and why_event -------------------------------------------------------------------------
def test_why_match_gives_each_component_verdict_and_the_result():
    timeline = run({"components": ["full", "swa"], "kv_size": 32, "sliding_window": 4, "swa_kv_size": 24},
                   {"op": "insert", "key": list(range(1, 13))},
                   {"op": "match", "key": [1, 2, 3, 4, 99]},
                   {"op": "evict", "swa": 4},
                   {"op": "match", "key": list(range(1, 11))})
    answer = why_match(timeline, 4)
    assert answer.title == "why the match at step 4 (match, line 5) stopped where it did"
    assert answer.lines[0] == "Full accepts 10 tokens, up to node #4: key ends inside node #1 (2 of 4 tokens, split needed)"
    assert answer.lines[1] == "SWA accepts 4 tokens, up to node #3: window run of 2 tokens since tombstone #2 < sliding_window 4"
    assert answer.lines[2] == "result: prefix_len 4, ending at node #3, the deepest node every component accepts"
    assert answer.steps == (4,)
    with pytest.raises(ValueError, match=r"step 3 \(evict\) made no match to explain"):
        why_match(timeline, 3)
    with pytest.raises(ValueError, match="out of range"):
        why_match(timeline, 0)


def test_why_match_on_a_prefill_names_the_mamba_stop(tombstoned):
    timeline = run({"components": ["full", "mamba"], "kv_size": 64, "mamba_size": 16},
                   {"op": "insert", "key": [1, 2, 3, 4]},
                   {"op": "insert", "key": [1, 2, 3, 4, 5, 6, 7, 8]},
                   {"op": "match", "key": [1, 2, 3, 4, 5, 6]},
                   {"op": "req_prefill", "req": "r9", "tokens": [1, 2, 3, 4, 5, 6]})
    answer = why_match(timeline, 4)
    assert "req_prefill r9" in answer.title
    assert line(answer, "Mamba") == ("Mamba accepts 4 tokens, up to node #1: nearest Mamba state at node #1 (4 tokens); "
                                     "node #3 below it holds none")
    assert line(answer, "result") == "result: prefix_len 4, ending at node #1, the deepest node every component accepts"


def test_why_event_walks_a_cascade_back_to_its_trigger(tombstoned):
    cascade = event_index(tombstoned, 4, EventKind.CASCADE, "mamba")
    trigger = event_index(tombstoned, 4, EventKind.TOMBSTONE, "swa")
    answer = why_event(tombstoned, 4, cascade)
    assert answer.lines[0] == "at step 4 (req_prefill r1, line 5), for request r1"
    assert answer.lines[1].startswith(f"triggered by event {trigger}: ") and "tombstone swa node #2" in answer.lines[1]
    assert "SWA capacity eviction needed 2 slots" in answer.lines[2]
    own = why_event(tombstoned, 4, trigger)
    assert own.lines[1].endswith("the cascade took its Mamba state")
    verdict = why_event(tombstoned, 3, event_index(tombstoned, 3, EventKind.VERDICT, "full"))
    assert verdict.lines[1] == "Full's match verdict: it accepts 10 tokens, up to node #1: key ends"
    with pytest.raises(ValueError, match="no event 99"):
        why_event(tombstoned, 4, 99)


def test_why_event_on_a_deletion_names_the_eviction_that_chose_the_node(deleted):
    answer = why_event(deleted, 3, event_index(deleted, 3, EventKind.DELETE))
    assert "evict swa node #1" in answer.lines[1]
    assert answer.lines[2].startswith("SWA capacity eviction needed 4 slots (an allocation in new_request fell short)")


def test_explanation_text_is_plain_text():
    answer = Explanation("title", ("one", "two"), (3, 5))
    assert answer.text() == "title\n  one\n  two\nsteps cited: 3, 5"


# ---- the index --------------------------------------------------------------------------------------
class CountingRecords(list):
    """The timeline's records, noting every step read."""

    def __init__(self, records) -> None:
        super().__init__(records)
        self.read: set[int] = set()

    def __getitem__(self, i):
        item = super().__getitem__(i)
        self.read.add(item.index)
        return item


@pytest.fixture(scope="module")
def long_timeline():
    records = list(random_records(10_000, 7, ("full", "swa", "mamba")))
    return Runner(scenario_from_records(records[0], records[1:]), checks=False).run()


def related_nodes(timeline, index: dict[int, list[int]], step: int, node: int) -> set[int]:
    """The node, its ancestors, and the nodes it was split from (for inherited locks)."""
    state = timeline.state_after(step)
    out, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n in out:
            continue
        out.add(n)
        for s in index.get(n, []):
            for e in list.__getitem__(timeline.records, s - 1).events:
                if e.node == n and e.kind is EventKind.SPLIT:
                    todo.append(int(re.match(r"child (\d+)", e.detail).group(1)))
    parent = state.record(node).parent
    while parent is not None:
        out.add(parent)
        parent = state.record(parent).parent
    return out


def test_a_long_timeline_is_answered_from_the_index_reading_only_the_nodes_steps(long_timeline):
    timeline = long_timeline
    index: dict[int, list[int]] = {}  # as the TUI cursor keeps it
    for record in timeline.records:
        for n in {e.node for e in record.events if e.node is not None}:
            index.setdefault(n, []).append(record.index)
    asked: list[int] = []

    def steps_touching(node: int) -> list[int]:
        asked.append(node)
        return index.get(node, [])

    step = len(timeline.records)
    state = timeline.state_after(step)
    busy = max((n for n in state.records if n != state.root_id), key=lambda n: len(index.get(n, [])))
    assert len(index[busy]) > 50  # a node with a long story
    timeline.records = counting = CountingRecords(timeline.records)
    try:
        answer = why_node(timeline, step, busy, steps_touching)
    finally:
        timeline.records = list(counting)
    assert busy in asked and answer.title == f"node #{busy} after step {step}"
    allowed = {s for n in related_nodes(timeline, index, step, busy) for s in index.get(n, [])}
    assert counting.read and counting.read <= allowed
    assert len(counting.read) < len(timeline.records) / 10


def test_the_built_in_index_is_built_once_and_then_only_extended(long_timeline):
    timeline = long_timeline
    steps = node_steps(timeline)
    steps(0)  # builds it: one pass
    timeline.records = counting = CountingRecords(timeline.records)
    try:
        node = max(timeline.final.records)
        why_node(timeline, len(counting), node)
        assert len(counting.read) <= len(steps(node)) + 64
        assert node_steps(timeline)(node) == steps(node)  # the same index, kept with the timeline
    finally:
        timeline.records = list(counting)


def test_a_host_only_node_tells_its_demotion_and_a_held_transfer_holds_its_lock():
    host = {**HYBRID, "kv_size": 32, "hicache": {"write_policy": "write_through", "load_back_threshold": 1,
                                                  "transfers": "held"}}
    timeline = run(host, {"op": "insert", "key": [1, 2, 3, 4, 5, 6, 7, 8]},
                   {"op": "flush"}, {"op": "evict", "full": 4})
    in_flight = why_node(timeline, 1, 1).text()
    assert re.search(r"Full lock_ref 1: held by the backup #\d+ in flight since step 1", in_flight)
    after = why_node(timeline, 3, 1).text()
    assert "Full: on the host only (4 tokens); demoted at step 3" in after and "so it stayed, host-only" in after
    assert "Mamba: on the host only (1 state)" in after and "a cascade from Full's demotion to the host" in after
    assert "Full unlocked; last released at step 2 (flush" in after


def test_a_match_step_or_a_failed_match_result_asks_about_the_match():
    """Issue 30: the TUI's y explains why the match stopped on these steps (not the node it follows)."""
    from workbench.model.debugging.why import asks_about_its_match

    header = {"schema": 1, "scenario": {"name": "t"}, "config": {"components": ["full"], "kv_size": 32}}
    timeline = Runner(scenario_from_records(header, [
        {"op": "insert", "key": [1, 2, 3, 4]},
        {"op": "match", "key": [1, 2, 3, 4, 5]},  # passes: still a match
        {"op": "req_prefill", "req": "r", "tokens": [1, 2, 3, 9], "expect": {"prefix_len": 2}},  # its match failed
        {"op": "req_prefill", "req": "q", "tokens": [1, 2, 3, 4, 9]},  # passed: the request is the question
        {"op": "insert", "key": [1, 2, 3, 9], "expect": {"prefix_len": 1}},  # failed, but no match ran
    ])).run()
    assert [asks_about_its_match(r) for r in timeline.records] == [False, True, True, False, False]
