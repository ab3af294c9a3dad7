"""Breakpoints: the condition language, the search against a brute-force reading of
every step, the TimelineCursor's continue / reverse-continue, and ``urc run --until``
and ``urc diff`` headless."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from urc_util import urc
from workbench.model.debugging.breakpoints import ConditionError, holds, parse_condition
from workbench.model.timeline.search import search
from workbench.model.debugging.cursor import TimelineCursor
from workbench.model.timeline.diff import diff_text
from workbench.model.timeline.runner import Runner, run_scenario
from workbench.model.scenarios.scenario import scenario_from_records
from workbench.model.scenarios.workload import random_records

ROOT = Path(__file__).resolve().parents[2]
TOUR_SWA = str(ROOT / "scenarios" / "tour_swa.toml")
HYBRID = ("full", "swa", "mamba")


@pytest.fixture(scope="module")
def hybrid_timeline():
    records = list(random_records(600, seed=3, components=HYBRID))
    return Runner(scenario_from_records(records[0], records[1:])).run()


# ---- the language -------------------------------------------------------------------------------


def test_terms_parse_into_fields():
    c = parse_condition("event=cascade component=swa node=7 op=evict req=r3 step>=10 swa_available<4")
    assert (c.event, c.component, c.node, c.op, c.req) == ("cascade", "swa", 7, "evict", "r3")
    assert [str(s) for s in c.steps] == ["step>=10"] and [str(p) for p in c.pools] == ["swa_available<4"]
    assert parse_condition("violation").violation == "" and parse_condition("fingerprint").violation == "match.fingerprint"
    assert parse_condition("violation=lock").violation == "lock"
    assert parse_condition("failed").failed and parse_condition("error").error
    assert parse_condition("  requests>2  ").text == "requests>2"


@pytest.mark.parametrize("text, says", [
    ("", "an empty condition"),
    ("event=bogus", "unknown event kind 'bogus'"),
    ("component=mamba", "unknown component 'mamba'; this cache has full, swa"),
    ("node=abc", "'abc' is not a whole number"),
    ("node<3", "node takes '='"),
    ("colour=red", "unknown term 'colour'"),
    ("mamba_available<3", "unknown term 'mamba_available'"),
    ("cause=sunspots", "unknown cause 'sunspots'"),
    ("import os", "cannot read 'import'"),
    ("__import__('os')", "cannot read"),
])
def test_bad_conditions_say_which_term(text, says):
    with pytest.raises(ConditionError, match=None) as info:
        parse_condition(text, ("full", "swa"))
    assert says in str(info.value)


# ---- the search against brute force ---------------------------------------------------------------


def brute(timeline, text, index) -> bool:
    """What the condition means, read from whole states (slow and obvious)."""
    c = parse_condition(text)
    record = timeline.records[index - 1]
    if c.event:
        return any(e.kind.value == c.event or (c.event == "cascade" and e.cause.value == "cascade")
                   for e in record.events if c.component in (None, e.component) and c.node in (None, e.node))
    if c.node is not None:
        before, after = timeline.state_after(index - 1).record(c.node), timeline.state_after(index).record(c.node)
        if before is None or after is None:
            return (before is None) != (after is None)
        return any((a.value_len, a.lock_ref, a.extras) != (b.value_len, b.lock_ref, b.extras)
                   for a, b in zip(before.components, after.components))
    if c.pools:
        pool = c.pools[0]
        component, _, counter = pool.field.partition("_")
        now = getattr(timeline.state_after(index).pools[component], counter)
        then = getattr(timeline.state_after(index - 1).pools[component], counter)
        return pool.test(now) and not pool.test(then)
    raise AssertionError(text)


@pytest.mark.parametrize("text", [
    "event=cascade", "event=tombstone component=swa", "event=evict component=mamba", "event=split",
    "node=5", "node=12", "swa_available<100", "full_evictable>=100", "mamba_available<=4",
])
def test_search_lands_where_a_brute_force_reading_says(hybrid_timeline, text):
    timeline = hybrid_timeline
    expected = [i for i in range(1, len(timeline) + 1) if brute(timeline, text, i)]
    assert [i for i in range(1, len(timeline) + 1) if holds(timeline, parse_condition(text), i)] == expected
    assert expected, f"the fixture should exercise {text}"
    rng = random.Random(text)
    for start in [0, len(timeline)] + rng.sample(range(len(timeline)), 20):
        forward = next((i for i in expected if i > start), None)
        backward = next((i for i in reversed(expected) if i < start), None)
        got = search(timeline, [parse_condition(text)], start, True)
        assert (got[0] if got else None) == forward
        got = search(timeline, [parse_condition(text)], start, False)
        assert (got[0] if got else None) == backward


@pytest.mark.parametrize("texts", [
    ["swa_available<100"], ["full_evictable>=100"], ["mamba_available<=4"], ["nodes>=40"], ["requests>1"],
    ["swa_tombstones>3", "mamba_tombstones>=2"], ["full_available<200 step>=200"], ["evictable_leaves!=3"],
])
def test_counter_conditions_read_off_the_series_land_where_each_step_read_does(hybrid_timeline, texts):
    from workbench.model.timeline.series import RunSeries

    timeline, conditions = hybrid_timeline, [parse_condition(t, HYBRID) for t in texts]
    series = RunSeries(timeline)
    assert all(c.where(series) is not None for c in conditions)
    expected = [i for i in range(1, len(timeline) + 1) if any(holds(timeline, c, i) for c in conditions)]
    assert expected, f"the fixture should exercise {texts}"
    assert [i for i in range(len(timeline) + 1) if any(c.where(series)[i] for c in conditions)] == expected
    for start in [0, len(timeline), *range(1, len(timeline), 23)]:
        for forward in (True, False):
            assert search(timeline, conditions, start, forward, series=series) == search(timeline, conditions,
                                                                                      start, forward)
    assert RunSeries(timeline, conditions).breakpoint_steps.tolist() == expected


def test_conditions_that_read_a_steps_record_are_not_read_off_the_series(hybrid_timeline):
    from workbench.model.timeline.series import RunSeries

    series = RunSeries(hybrid_timeline)
    for text in ("event=cascade swa_available<100", "op=insert full_available<60", "violation", "node=5"):
        assert parse_condition(text, HYBRID).where(series) is None


def test_a_list_of_conditions_stops_at_the_nearest_of_any(hybrid_timeline):
    texts = ["event=cascade", "event=split"]
    conditions = [parse_condition(t) for t in texts]
    for start in range(0, len(hybrid_timeline), 37):
        each = [search(hybrid_timeline, [c], start) for c in conditions]
        nearest = min((h[0] for h in each if h), default=None)
        hit = search(hybrid_timeline, conditions, start)
        assert (hit[0] if hit else None) == nearest


def test_failures_violations_and_errors_are_found():
    config = {"components": ["full"], "kv_size": 8}
    steps = [{"op": "insert", "key": [1, 2, 3]}, {"op": "match", "key": [1, 2, 3], "expect": {"prefix_len": 2}},
             {"op": "insert", "key": list(range(10, 30)), "expect_error": "nope"},
             {"op": "insert", "key": list(range(40, 60))}]
    timeline = Runner(scenario_from_records({"schema": 1, "scenario": {"name": "x"}, "config": config}, steps)).run()
    hits = lambda text: [i for i in range(1, 5) if holds(timeline, parse_condition(text), i)]  # noqa: E731
    assert hits("failed") == [2, 3, 4]
    assert hits("error") == [3, 4]
    assert hits("op=insert error") == [3, 4] and hits("op=match") == [2] and hits("step>2") == [3, 4]
    assert hits("violation") == []


# ---- the cursor: continue and reverse-continue -------------------------------------------------------


def test_cursor_continue_and_reverse_continue_and_watch(hybrid_timeline):
    cursor = TimelineCursor([hybrid_timeline.scenario])
    cursor.load(0)
    assert cursor.run_to_breakpoint() is None and cursor.step == 0  # default: failures only, and none failed
    cursor.add_breakpoint("event=cascade")
    cascades = [i for i in range(1, len(cursor.timeline) + 1) if brute(cursor.timeline, "event=cascade", i)]
    seen = []
    while (hit := cursor.run_to_breakpoint()) is not None:
        seen.append(cursor.step)
    assert seen == cascades and cursor.step == cascades[-1]
    back = []
    while cursor.run_to_breakpoint(forward=False) is not None:
        back.append(cursor.step)
    assert back == cascades[-2::-1]
    with pytest.raises(ConditionError):
        cursor.add_breakpoint("event=nope")
    assert [c.text for c in cursor.breakpoints] == ["event=cascade"]
    assert cursor.remove_breakpoint("event=cascade") and cursor.breakpoints == []
    cursor.watch(5)
    cursor.first()
    hit = cursor.run_to_breakpoint()
    assert hit is not None and cursor.step == next(i for i in range(1, 600) if brute(cursor.timeline, "node=5", i))
    del hit


def test_a_long_scan_reads_chunk_by_chunk_lands_where_search_does_and_stops_when_told(hybrid_timeline, monkeypatch):
    from workbench.model.debugging import cursor as cursor_module

    monkeypatch.setattr(cursor_module, "SCAN_CHUNK", 37)
    monkeypatch.setattr(cursor_module, "QUICK_STEPS", 0)
    cursor = TimelineCursor([hybrid_timeline.scenario])
    cursor.load(0)
    cursor.add_breakpoint("event=split")
    assert not cursor.breakpoints_quick()
    conditions = cursor.active_breakpoints
    assert search(cursor.timeline, conditions, 0) is not None  # the fixture has splits to find
    for start in (0, 1, 36, 37, 38, 299, len(hybrid_timeline) - 1, len(hybrid_timeline)):
        cursor.go(start)
        for forward in (True, False):
            reports = []
            hit = cursor.find_breakpoint(forward, progress=lambda done, total: reports.append((done, total)))
            assert hit == search(cursor.timeline, conditions, start, forward)
            assert cursor.step == start  # found, not moved
            assert all(done <= total for done, total in reports) and reports == sorted(reports)
    cursor.go(0)
    asked = []
    cursor.breakpoints = [parse_condition("req=nobody-has-this-name")]
    asked.clear()
    assert cursor.find_breakpoint(True, should_stop=lambda: asked.append(1) or len(asked) > 2) is None
    assert len(asked) == 3  # two chunks read, then told to stop: the rest never read
    cursor.breakpoints = [parse_condition("swa_available<100", HYBRID)]
    assert cursor.breakpoints_quick()  # counters: read off the series at once


# ---- headless --------------------------------------------------------------------------------------


def test_run_until_stops_at_the_first_matching_step_and_prints_it(capsys):
    timeline = run_scenario(TOUR_SWA)
    first = next(r.index for r in timeline.records
                 if any(e.kind.value == "tombstone" and e.component == "swa" for e in timeline.records[r.index - 1].events))
    rc, out, err = urc(capsys, "run", TOUR_SWA, "--until", "event=tombstone component=swa")
    assert rc == 0, err
    assert out.startswith(f"stopped at step {first} (evict, line ")
    assert f"-- step {first} (" in out and "tombstone swa node #" in out
    rc, out, _ = urc(capsys, "run", TOUR_SWA, "--until", "event=cow", "--until", "op=release_window")
    assert rc == 0 and "op=release_window" in out.splitlines()[0]


def test_run_until_that_never_holds_exits_1(capsys):
    rc, out, _ = urc(capsys, "run", TOUR_SWA, "--until", "event=cow")
    assert rc == 1 and "no step matched --until (16 steps run)" in out


@pytest.mark.parametrize("argv, says", [
    (["--until", "event=bogus"], "--until: unknown event kind 'bogus'"),
    (["--until", "component=mamba"], "--until: unknown component 'mamba'"),
    (["--until", "violation", "--json"], "leave out --json"),
])
def test_run_until_bad_conditions_exit_2(capsys, argv, says):
    rc, out, err = urc(capsys, "run", TOUR_SWA, *argv)
    assert rc == 2 and says in err and out == ""


def test_urc_diff_prints_the_timeline_diff(capsys):
    timeline = run_scenario(TOUR_SWA)
    rc, out, err = urc(capsys, "diff", TOUR_SWA, "--from", "2", "--to", "9")
    assert rc == 0, err
    assert out.splitlines() == [f"{TOUR_SWA}: from step 2 to step 9"] + diff_text(timeline.diff(2, 9))
    rc, out, _ = urc(capsys, "diff", TOUR_SWA, "--to", "5", "--json")
    data = json.loads(out)
    diff = timeline.diff(4, 5)
    assert (data["from_step"], data["to_step"]) == (4, 5)
    assert data["added"] == list(diff.added) and [(s["parent"], s["child"]) for s in data["splits"]] == list(diff.splits)
    rc, out, _ = urc(capsys, "diff", TOUR_SWA, "--from", "4", "--to", "4")
    assert rc == 0 and out.splitlines()[1] == "  (no change)"


@pytest.mark.parametrize("argv, says", [
    (["--to", "99"], "--to must be between 0 and 16"),
    (["--from", "-1"], "--from must be between 0 and 16"),
])
def test_urc_diff_bad_steps_exit_2(capsys, argv, says):
    rc, out, err = urc(capsys, "diff", TOUR_SWA, *argv)
    assert rc == 2 and says in err



def test_op_terms_name_an_op_by_either_of_its_names(capsys, tmp_path):
    """``op=release`` stops at a step written ``req_finish`` (its older name), and back."""
    old = tmp_path / "old.toml"
    old.write_text('schema = 1\n[scenario]\nname = "old names"\n[config]\ncomponents = ["full"]\nkv_size = 32\n'
                   '[[step]]\nop = "req_prefill"\nreq = "r1"\ntokens = [1, 2, 3]\n'
                   '[[step]]\nop = "req_finish"\nreq = "r1"\n', encoding="utf-8")
    first = next(r.index for r in run_scenario(str(old)).records if r.step.op == "req_finish")
    for term in ("op=release", "op=req_finish"):
        rc, out, _ = urc(capsys, "run", str(old), "--until", term)
        assert rc == 0 and out.startswith(f"stopped at step {first} (req_finish, line "), out


def test_the_charts_markers_read_chunk_by_chunk_are_the_whole_reading_and_stop_when_told(hybrid_timeline):
    from workbench.model.timeline.series import RunSeries

    conditions = (parse_condition("event=split"), parse_condition("event=cascade"))
    whole = RunSeries(hybrid_timeline, conditions).breakpoint_steps.tolist()
    series = RunSeries(hybrid_timeline)
    reports = []
    assert series.find_hits(conditions, progress=lambda done, total: reports.append(done), chunk=50) == whole
    assert whole and reports == sorted(reports) and reports[-1] == len(hybrid_timeline)
    asked = []
    assert series.find_hits(conditions, should_stop=lambda: asked.append(1) or len(asked) > 3, chunk=50) is None
    series.set_breakpoints(conditions, whole[:2])  # found elsewhere: taken as given
    assert series.breakpoint_steps.tolist() == whole[:2]
