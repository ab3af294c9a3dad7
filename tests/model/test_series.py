"""The series of a whole run (workbench/model/timeline/series.py): every value is the
step's state as the timeline holds it, markers land on the failing steps, and "where it
changes" finds a planted one-slot leak at its step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from workbench.model.debugging.breakpoints import parse_condition
from workbench.model.scenarios.scenario import scenario_from_records
from workbench.model.scenarios.workload import random_records
from workbench.model.timeline import series as series_module
from workbench.model.timeline.runner import Runner, one_thread, run_scenario, state_field
from workbench.model.timeline.series import HITS, RunSeries, changes_at, downsample, runs

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"


@pytest.mark.parametrize("name", ["tour", "tour_swa", "tour_mamba", "tour_hicache_hybrid", "tour_sessions"])
def test_every_value_is_the_state_after_its_step(name):
    timeline = run_scenario(SCENARIOS / f"{name}.toml")
    series = RunSeries(timeline)
    assert series.steps == len(timeline)
    derived = {n for n, i in series.info.items() if i.label == "unaccounted" or i.group == HITS}
    for step in range(len(timeline) + 1):
        state = timeline.state_after(step)
        for field in set(series.names()) - derived:  # pools' counters, nodes, leaves, tombstones, requests
            assert series.values(field)[step] == state_field(state, field), (field, step)
        for pool, view in state.pools.items():
            if not pool.endswith("_host"):  # every device slot is accounted for in a healthy run
                assert series.values(f"{pool}_unaccounted")[step] == 0
                assert view.total - view.available - view.evictable - view.protected - view.held == 0
        metrics = state.metrics
        looked_up = metrics["device_hit_tokens"] + metrics["host_hit_tokens"] + metrics["miss_tokens"]
        rate = series.values("hit_rate")[step]
        assert np.isnan(rate) if not looked_up else rate == metrics["device_hit_tokens"] / looked_up


def test_the_recent_hit_rate_counts_the_last_steps_only(monkeypatch):
    monkeypatch.setattr(series_module, "RECENT_STEPS", 3)
    timeline = run_scenario(SCENARIOS / "tour.toml")
    recent = RunSeries(timeline).values("hit_rate_recent")
    for step in range(len(timeline) + 1):
        now, then = timeline.state_after(step).metrics, timeline.state_after(max(0, step - 3)).metrics
        if step < 3:
            then = {k: 0 for k in now}
        gained = {k: now[k] - then[k] for k in ("device_hit_tokens", "host_hit_tokens", "miss_tokens")}
        looked_up = sum(gained.values())
        assert np.isnan(recent[step]) if not looked_up else recent[step] == gained["device_hit_tokens"] / looked_up


def test_a_host_tier_adds_its_pools_and_host_hit_rate():
    series = RunSeries(run_scenario(SCENARIOS / "tour_hicache.toml"))
    assert "full_host_available" in series.info and "host_hit_rate" in series.info
    assert series.select(["full_host"]) == [f"full_host_{c}" for c in
                                            ("total", "available", "evictable", "protected", "held", "unaccounted")]
    assert "host_hit_rate" not in RunSeries(run_scenario(SCENARIOS / "tour.toml")).info


def test_select_takes_names_and_charts_and_names_what_it_knows():
    series = RunSeries(run_scenario(SCENARIOS / "tour_swa.toml"))
    assert series.select(["nodes", "hits", "nodes"]) == ["nodes", "hit_rate", "hit_rate_recent"]
    assert series.select(["tree"]) == ["nodes", "evictable_leaves", "swa_tombstones", "requests"]
    with pytest.raises(KeyError, match="no series or chart 'full_avail'.*full_available"):
        series.select(["full_avail"])


def test_refresh_reads_only_the_steps_added_and_agrees_with_a_fresh_read():
    runner = Runner(run_scenario(SCENARIOS / "tour_mamba.toml").scenario)
    live = RunSeries(runner.timeline)
    assert live.steps == 0 and live.values("nodes").tolist() == [0.0]
    while not runner.done:
        runner.step()
        assert live.refresh() == 1
    assert live.refresh() == 0
    whole = RunSeries(runner.timeline)
    for name in whole.names():
        np.testing.assert_array_equal(live.values(name), whole.values(name))


def test_failing_steps_and_breakpoints_are_marked():
    timeline = run_scenario(SCENARIOS / "fuzz" / "retract-pads-unaligned-prefix.toml")
    series = RunSeries(timeline, [parse_condition("op=retract")])
    assert series.failing_steps.tolist() == [r.index for r in timeline.records if not r.passed] and series.first_failure
    assert series.breakpoint_steps.tolist() == [r.index for r in timeline.records if r.step.op == "retract"]
    series.set_breakpoints([parse_condition("step>=2")])
    assert series.breakpoint_steps.tolist() == list(range(2, len(timeline) + 1))
    series.set_breakpoints([])
    assert series.breakpoint_steps.size == 0


# ---- the pure functions -----------------------------------------------------------------------


def test_changes_at_finds_where_a_value_or_its_range_is_left():
    values = np.array([0, 0, 0, 1, 1, 2], dtype=float)
    assert changes_at(values, 0) == 3 and changes_at(values, 3) == 5 and changes_at(values, 5) is None
    wobble = np.array([5, 6, 5, 6, 5, 6, 9, 5], dtype=float)
    assert changes_at(wobble, 3) == 4  # its value at step 3 is left at once
    assert changes_at(wobble, 3, window=3) == 6  # the 5..6 it kept is left at step 6
    nan_first = np.array([np.nan, np.nan, 0.5, 0.5])
    assert changes_at(nan_first, 0) == 2 and changes_at(nan_first, 2) is None
    with pytest.raises(IndexError):
        changes_at(values, 6)


def test_downsample_keeps_a_one_step_spike_and_the_bucket_count():
    values = np.zeros(10_001)
    values[7_777] = 5
    values[3_000] = -2
    points = downsample(values, 100)
    assert len(points.steps) <= 100 and points.steps[0] == 0
    assert points.high.max() == 5 and points.low.min() == -2
    spike = np.searchsorted(points.steps, 7_777, side="right") - 1
    assert points.high[spike] == 5 and points.steps[spike] <= 7_777 < points.steps[spike + 1]
    short = downsample(values[:50], 100)  # fewer steps than buckets: every step as it is
    assert short.steps.tolist() == list(range(50)) and (short.low == short.high).all()
    window = downsample(values, 10, start=7_000, end=8_000)
    assert window.steps[0] == 7_000 and window.high.max() == 5 and len(window.steps) == 10


def test_runs_join_marked_steps_closer_than_a_gap():
    steps = np.array([3, 4, 5, 9, 20, 21])
    assert runs(steps) == [(3, 5), (9, 9), (20, 21)]
    assert runs(steps, gap=4) == [(3, 9), (20, 21)]
    assert runs(np.array([], dtype=np.int64)) == []


# ---- a planted leak in a long trace -------------------------------------------------------------

LEAK_STEPS, LEAK_AT = 20_000, 12_345


def _leaking_timeline():
    """A 20,000-step fuzzer-like trace (``workload.random_records``), with one Full KV slot
    taken from the pool for nobody as step LEAK_AT runs: a one-slot leak, outside any node
    and any request."""
    records = list(random_records(LEAK_STEPS, seed=0, components=("full",)))
    scenario = scenario_from_records(records[0], records[1:LEAK_STEPS + 1])
    runner = Runner(scenario)
    with one_thread():
        for index in range(1, LEAK_STEPS + 1):
            if index == LEAK_AT:
                assert runner.cache.kv_pool.alloc(1).numel() == 1
            runner.step()
    return runner.timeline


def test_a_one_slot_leak_is_found_at_its_step():
    timeline = _leaking_timeline()
    assert len(timeline) == LEAK_STEPS and timeline.records[LEAK_AT - 2].passed
    series = RunSeries(timeline, [parse_condition("violation=pool.full.balance")])
    assert series.first_failure == LEAK_AT  # the failure marker
    assert series.marker_runs(series.failing_steps, 1200)[0][0] == LEAK_AT  # as a chart 1,200 wide draws it
    assert series.breakpoint_steps[0] == LEAK_AT
    assert series.changes_at("full_unaccounted") == LEAK_AT  # where it changes, from the run's start
    unaccounted = series.values("full_unaccounted")
    assert not unaccounted[:LEAK_AT].any() and (unaccounted[LEAK_AT:] == 1).all()
    points = series.points("full_unaccounted", 1200)
    assert len(points.steps) <= 1200 and points.high.max() == 1
