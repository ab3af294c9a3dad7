"""The timeline keeps each step's state as what the step changed. These tests prove
it keeps the same states a full snapshot after every step would: for every shipped
scenario and for random op sequences, in order and in random access."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.model.timeline.runner import Runner, same_state
from workbench.model.scenarios.scenario import load_scenario, scenario_from_records
from workbench.model.timeline.states import StateStore

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p for p in (ROOT / "scenarios").rglob("*.toml") if p.parent.name != "fuzz")  # fuzz/: faulted caches


def run_with_snapshots(scenario, keyframe_every: int = 64):
    """Run, taking a full snapshot of the cache after every step beside the timeline."""
    runner = Runner(scenario)
    store = runner.timeline.store
    store.keyframe_every = keyframe_every
    snapshots = [runner.cache.snapshot()]
    runner.timeline.on_step(lambda record: snapshots.append(runner.cache.snapshot()))
    return runner.run(), snapshots


def assert_states_equal(timeline, snapshots, order) -> None:
    for i in order:
        state = timeline.state_after(i)
        assert state.to_snapshot() == snapshots[i], f"step {i}"


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_scenario_state_equals_a_full_snapshot(path):
    timeline, snapshots = run_with_snapshots(load_scenario(path), keyframe_every=3)
    n = len(timeline)
    assert_states_equal(timeline, snapshots, range(n + 1))  # forward, one delta at a time
    shuffled = list(range(n + 1))
    random.Random(0).shuffle(shuffled)
    assert_states_equal(timeline, snapshots, shuffled)  # random access through keyframes
    assert not any(v.name == "timeline.drift" for r in timeline.records for v in r.violations)


CONFIGS = [
    {"components": ["full"], "kv_size": 48, "page_size": 1},
    {"components": ["full"], "kv_size": 64, "page_size": 4},
    {"components": ["full", "swa"], "kv_size": 48, "sliding_window": 4, "swa_kv_size": 24},
    {"components": ["full", "mamba"], "kv_size": 48, "mamba_size": 6},
    {"components": ["full", "swa", "mamba"], "kv_size": 64, "sliding_window": 4, "mamba_size": 6},
]


@st.composite
def op_sequences(draw):
    config = draw(st.sampled_from(CONFIGS))
    comps = config["components"]
    steps, held, matches, reqs = [], [], [], []
    token = st.integers(1, 3)
    for i in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["insert", "insert", "match", "lock", "unlock", "evict", "prefill", "decode", "finish"]))
        if kind == "insert":
            steps.append({"op": "insert", "key": draw(st.lists(token, min_size=1, max_size=12))})
        elif kind == "match":
            matches.append(f"m{i}")
            steps.append({"op": "match", "key": draw(st.lists(token, max_size=12)), "as": f"m{i}"})
        elif kind == "lock" and matches:
            held.append(f"l{i}")
            steps.append({"op": "lock", "match": draw(st.sampled_from(matches)), "as": f"l{i}"})
        elif kind == "unlock" and held:
            steps.append({"op": "unlock", "lock": held.pop(draw(st.integers(0, len(held) - 1)))})
        elif kind == "evict":
            amounts = {c: draw(st.integers(0, 8)) for c in comps}
            steps.append({"op": "evict", **{c: n for c, n in amounts.items() if n}})
        elif kind == "prefill":
            reqs.append(f"r{i}")
            steps.append({"op": "req_prefill", "req": f"r{i}", "tokens": draw(st.lists(token, min_size=1, max_size=10))})
        elif kind == "decode" and reqs:
            step = {"op": "req_decode", "req": draw(st.sampled_from(reqs)), "tokens": draw(st.lists(token, min_size=1, max_size=6))}
            if "swa" in comps and draw(st.booleans()):
                step["slide_window"] = True
            steps.append(step)
        elif kind == "finish" and reqs:
            steps.append({"op": "req_finish", "req": reqs.pop(draw(st.integers(0, len(reqs) - 1)))})
    return scenario_from_records({"schema": 1, "scenario": {"name": "random"}, "config": config}, steps)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op_sequences())
def test_random_sequences_keep_the_same_states(scenario):
    timeline, snapshots = run_with_snapshots(scenario, keyframe_every=4)
    assert_states_equal(timeline, snapshots, range(len(timeline) + 1))
    assert_states_equal(timeline, snapshots, reversed(range(len(timeline) + 1)))
    drift = [v for r in timeline.records for v in r.violations if v.name == "timeline.drift"]
    assert not drift


def test_a_state_costs_what_the_step_changed():
    """A step that touches one node stores one record, however large the tree."""
    steps = [{"op": "insert", "key": [i, 1, 2]} for i in range(1, 200)]
    steps += [{"op": "match", "key": [5, 1, 2], "as": "m"}]
    scenario = scenario_from_records(
        {"schema": 1, "scenario": {"name": "wide"}, "config": {"components": ["full"], "kv_size": 1024}}, steps)
    timeline = Runner(scenario).run()
    store: StateStore = timeline.store
    assert len(store.current) == 200  # root + 199 leaves
    assert len(store.deltas[-1]) <= 3  # the match refreshed one leaf (and the root's record)
    assert all(len(d) <= 3 for d in store.deltas[1:])
    assert same_state(timeline.state_after(len(timeline)).to_snapshot(), timeline.final.to_snapshot())


def test_states_keep_the_sessions_views():
    """A state rebuilt from the records (time travel, diff) has the snapshot's session
    views: the radix sessions' frontiers and tombstones, the controller and the slots."""
    steps = [
        {"op": "session_open", "session": "s1"},
        {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4], "session": "s1"},
        {"op": "release", "req": "r1"},
        {"op": "session_release", "session": "s1"},
        {"op": "session_open", "session": "t", "streaming": True},
        {"op": "stream_turn", "req": "t1", "tokens": [7, 8], "session": "t"},
        {"op": "release", "req": "t1"},
        {"op": "session_release", "session": "t"},
    ]
    scenario = scenario_from_records({"schema": 1, "scenario": {"name": "sessions"}, "config": {
        "components": ["full"], "kv_size": 32, "session_radix_cache": True}}, steps)
    timeline, snapshots = run_with_snapshots(scenario, keyframe_every=2)
    assert_states_equal(timeline, snapshots, range(len(timeline) + 1))
    assert_states_equal(timeline, snapshots, reversed(range(len(timeline) + 1)))
    after_tag, after_close, turn = (timeline.state_after(i) for i in (3, 4, 6))
    assert after_tag.sessions.leaves["s1"]["full"]  # r1's finish tagged its path's frontier
    assert after_close.sessions.closed == ("s1",) and "s1" not in after_close.sessions.leaves
    assert turn.streaming_sessions.slots["t"].holds_kv
    assert timeline.state_after(0).streaming_sessions is None


@pytest.mark.parametrize("path", [p for p in SCENARIOS if p.stem in ("tour", "tour_swa", "tour_hicache_hybrid")],
                         ids=lambda p: p.stem)
def test_a_jump_reads_the_step_then_patches_the_one_before_from_it(path):
    """A jump reads step j, asks its children and LRU orders, then reads j - 1 (derived
    from j before j built them): j - 1's indexes are patched from j's when asked for,
    and equal a full snapshot's."""
    timeline, snapshots = run_with_snapshots(load_scenario(path), keyframe_every=5)
    store = timeline.store
    for j in range(len(timeline), 0, -1):
        store._cache.clear()
        after = timeline.state_after(j)
        before = timeline.state_after(j - 1)  # derived from ``after``, indexes not built yet
        assert after.to_snapshot() == snapshots[j]  # builds after's children and orders
        assert before._children is None and before._orders is None
        assert before.to_snapshot() == snapshots[j - 1], f"step {j - 1}"
        assert before._neighbour is not None
