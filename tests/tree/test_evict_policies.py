"""SGLang 0.5.23's eight eviction strategies on Full's leaves (cache/tree/leaf_policies.py).

The workloads are the oracle's (shared/oracle/examples-ext/evict_policy_*): the same
ops evict different leaves under lru, lfu and priority. The other policies are checked
against what their keys say, and the snapshot's order against what evict takes.
"""

from __future__ import annotations

import pytest

import random

from cache import CacheConfig
from cache.tree.leaf_policies import POLICIES, make_policy
from workbench.model.scenarios.scenario import scenario_from_records
from workbench.model.timeline.runner import Runner

from conftest import Checked

A, B, C = [1, 2, 3, 4], [10, 11, 12, 13], [20, 21, 22, 23]


def run(config: dict, *steps: dict):
    header = {"schema": 1, "scenario": {"name": "t"}, "config": {"components": ["full"], "kv_size": 64, **config}}
    timeline = Runner(scenario_from_records(header, list(steps))).run()
    assert timeline.passed, timeline.first_failure
    return timeline


def paths(state) -> dict[int, tuple]:
    return {n.id: n.path for n in state.nodes}


def three_keys(policy: str, **extra):
    """A inserted twice at priority 5 (2 hits), B at 3, C at 0; matches make A the oldest."""
    return run({"eviction_policy": policy, **extra},
               {"op": "insert", "key": A, "priority": 5}, {"op": "insert", "key": A, "priority": 5},
               {"op": "insert", "key": B, "priority": 3}, {"op": "insert", "key": C, "priority": 0},
               {"op": "match", "key": B}, {"op": "match", "key": C}, {"op": "match", "key": C},
               {"op": "evict", "full": 4}, {"op": "evict", "full": 4})


@pytest.mark.parametrize("policy, first, second", [
    ("lru", A, B), ("lfu", B, C), ("priority", C, B),  # the oracle's evict_policy_{lru,lfu,priority}_full_p1
    ("fifo", A, B), ("filo", C, B), ("mru", C, B), ("slru", B, C),
])
def test_the_same_workload_evicts_in_each_policys_order(policy, first, second):
    timeline = three_keys(policy)
    before = paths(timeline.state_after(7))
    hits = {p: n.hit_count for n in timeline.state_after(7).nodes for p in [n.path]}
    assert hits[tuple(A)] == 2 and hits[tuple(B)] == 1 and hits[tuple(C)] == 1  # a match counts no hit
    order = [before[i] for i in timeline.state_after(7).evictable_leaves]
    assert order[:2] == [tuple(first), tuple(second)]  # the snapshot's order is the one evict takes
    left = {n.path for n in timeline.state_after(8).non_root()}
    assert tuple(first) not in left and tuple(second) in left
    assert tuple(second) not in {n.path for n in timeline.final.non_root()}


def test_request_priorities_order_a_finished_request_below_a_higher_one():
    """The oracle's evict_policy_req_priority_full_p1: a prompt is kept at priority + 1."""
    timeline = run({"eviction_policy": "priority"},
                   {"op": "req_prefill", "req": "a", "tokens": [1, 2, 3, 4, 5, 6], "priority": 2},
                   {"op": "req_decode", "req": "a", "tokens": [7, 8]}, {"op": "release", "req": "a"},
                   {"op": "req_prefill", "req": "b", "tokens": [20, 21, 22, 23, 24, 25], "priority": 0},
                   {"op": "req_decode", "req": "b", "tokens": [26, 27]}, {"op": "release", "req": "b"},
                   {"op": "insert", "key": [1, 2, 3, 9, 9], "priority": 7},
                   {"op": "evict", "full": 2, "expect": {"full_evicted": 2}},
                   {"op": "evict", "full": 2, "expect": {"full_evicted": 6}},
                   {"op": "evict", "full": 2, "expect": {"full_evicted": 2}})
    state = timeline.state_after(7)
    by_path = {n.path: n for n in state.non_root()}
    assert (by_path[(1, 2, 3)].priority, by_path[(1, 2, 3)].hit_count) == (7, 2)
    assert by_path[(1, 2, 3, 4, 5, 6)].priority == 3 and by_path[(1, 2, 3, 4, 5, 6, 7, 8)].priority == 2
    assert by_path[tuple(range(20, 26))].priority == 1 and by_path[tuple(range(20, 28))].priority == 0
    order = [state.node(i).path[-1] for i in state.evictable_leaves]
    assert order == [27, 8, 9]
    assert {n.path[-1] for n in timeline.final.non_root()} == {3, 6, 9}
    assert state.node(state.evictable_leaves[0]).evict_note == "priority 0"


def test_tlru_evicts_the_tel_safe_tail_first_and_keeps_history():
    """threshold 3, estimate 1: a 6-token branch needs 4 cached; the part past that is TEL-safe."""
    full = Checked(kv_size=64, eviction_policy="tlru", eviction_policy_config={"threshold": 3, "next_prompt_estimate": 1})
    full.insert([1, 2, 3, 4, 5, 6])
    full.insert([1, 2, 3, 4, 9])  # splits at 4: [1..4] above [5, 6] and [9]
    full.insert(list(range(30, 38)))  # 8 tokens: budget 6, nothing cached before it
    tree = full.cache.tree
    by_tokens = {tuple(n.token_ids): n for n in tree.nodes.values() if n is not tree.root}
    upper, tail, fork, other = by_tokens[(1, 2, 3, 4)], by_tokens[(5, 6)], by_tokens[(9,)], by_tokens[tuple(range(30, 38))]
    assert (upper.tlru_prefix_len, upper.tlru_history_len) == (4, 6)  # the split inherits the branch's mark
    assert (tail.tlru_prefix_len, tail.tlru_history_len) == (6, 6)
    assert (fork.tlru_prefix_len, fork.tlru_history_len) == (5, 5)
    policy = tree.eviction_policy
    assert policy.tel_safe(tail) and policy.tel_safe(fork) and not policy.tel_safe(other)
    full.match(list(range(30, 38)))
    full.match([1, 2, 3, 4, 5, 6])  # the newest now, yet TEL-safe: it still goes before [30..37]
    assert full.evict(3).num_tokens_evicted == 3  # [9] then [5, 6]
    assert {tuple(n.token_ids) for n in tree.nodes.values() if n is not tree.root} == {(1, 2, 3, 4), tuple(range(30, 38))}
    assert upper.tlru_history_len == 6  # eviction never lowers the high-water mark
    assert not policy.tel_safe(upper)  # 0 cached before it < budget 4


def test_unknown_policies_and_arguments_are_refused_when_the_config_is_built():
    with pytest.raises(ValueError, match="Supported policies: 'lru', 'lfu', 'fifo', 'mru', 'filo', 'priority', "
                                         "'slru', 'tlru'"):
        CacheConfig(eviction_policy="arc")
    with pytest.raises(ValueError, match="does not take 'threshold'"):
        CacheConfig(eviction_policy="slru", eviction_policy_config={"threshold": 1})
    with pytest.raises(ValueError, match="does not take"):
        CacheConfig(eviction_policy="lru", eviction_policy_config={"protected_threshold": 1})
    with pytest.raises(ValueError, match="must be a number"):
        CacheConfig(eviction_policy="tlru", eviction_policy_config={"threshold": "big"})
    assert CacheConfig(eviction_policy="LFU").eviction_policy == "lfu"  # as SGLang, case-insensitive
    assert sorted(POLICIES) == sorted(["lru", "lfu", "fifo", "mru", "filo", "priority", "slru", "tlru"])
    assert make_policy("slru", {"protected_threshold": 1}).label() == "slru(protected_threshold=1)"
    assert make_policy("slru").label() == "slru"


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_evict_takes_leaves_in_the_order_the_snapshot_reports(policy):
    rng = random.Random(policy)
    config = {"threshold": 6, "next_prompt_estimate": 2} if policy == "tlru" else None
    full = Checked(kv_size=256, eviction_policy=policy, eviction_policy_config=config)
    for _ in range(40):
        key = [rng.randint(1, 3) for _ in range(rng.randint(1, 8))]
        if rng.random() < 0.6:
            full.insert(key, priority=rng.randint(0, 3))
        else:
            full.match(key)
    while order := full.cache.snapshot().evictable_leaves:
        first = full.cache.tree.nodes[order[0]]
        full.evict(1)
        assert full.cache.tree.nodes.get(first.id) is not first, f"{policy}: evict skipped the snapshot's first leaf"


def _policies_scenario(policy: str):
    """scenarios/policies.toml's steps under ``policy`` (its expectations are priority's)."""
    from pathlib import Path

    from workbench.model.scenarios.scenario import load_scenario

    scenario = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "policies.toml")
    steps = [{"op": s.op, **{k: v for k, v in s.fields.items()}} for s in scenario.steps[:8]]
    header = {"schema": 1, "scenario": {"name": "p"}, "config": {**scenario.config, "eviction_policy": policy}}
    return Runner(scenario_from_records(header, steps)).run()


@pytest.mark.parametrize("policy, gone", [("lru", A), ("lfu", B), ("priority", C)])
def test_the_bundled_policies_scenario_evicts_a_different_leaf_per_policy(policy, gone):
    timeline = _policies_scenario(policy)
    assert timeline.passed
    assert {n.path for n in timeline.final.non_root()} == {tuple(k) for k in (A, B, C)} - {tuple(gone)}


def test_why_names_the_policys_reason_for_a_full_eviction():
    from workbench.model.debugging.why import why_event

    timeline = _policies_scenario("priority")
    record = timeline.records[7]
    k = next(k for k, e in enumerate(record.events) if e.kind.value == "evict" and e.component == "full")
    text = why_event(timeline, 8, k).text()
    rival = next(n.id for n in timeline.final.non_root() if n.path == tuple(B))
    assert f"priority: node #{record.events[k].node} was evicted before #{rival}: priority 0 < priority 3" in text
    lfu = _policies_scenario("lfu")
    record = lfu.records[7]
    k = next(k for k, e in enumerate(record.events) if e.kind.value == "evict" and e.component == "full")
    assert "lfu: node" in why_event(lfu, 8, k).text() and "1 hit < 1 hit" in why_event(lfu, 8, k).text()


def test_views_show_the_policy_its_order_and_what_it_reads():
    from rich.console import Console

    from workbench.render.picture import picture
    from workbench.render.tree_view import render_state

    timeline = _policies_scenario("priority")
    state = timeline.state_after(7)
    assert state.eviction_policy == "priority"
    console = Console(width=200, record=True, color_system=None)
    console.print(render_state(state))
    text = console.export_text()
    c_id = next(n.id for n in state.non_root() if n.path == tuple(C))
    assert f"full evicts (priority) first: #{c_id} priority 0" in text
    assert "prio 5" in text and "prio 0" in text
    dot = picture(timeline, 7).source
    assert "full evicts (priority) first" in dot and "prio 3" in dot
    lru = _policies_scenario("lru").state_after(7)
    console = Console(width=200, record=True, color_system=None)
    console.print(render_state(lru))
    assert "full evicts" not in console.export_text() and "prio" not in console.export_text()
