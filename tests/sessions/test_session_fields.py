"""Expectable session state (``<component>_session_ref``, ``sessions_open``,
``session_generations``, ``sessions_closed``, ``session_leaves``, ``session_slots``):
each checked at load time with file:line, and read after the step on scenarios run live."""

from __future__ import annotations

import pytest

from workbench.model.scenarios.scenario import ScenarioError, load_scenario, scenario_from_records
from workbench.model.timeline.runner import Runner

HYBRID = {"components": ["full", "swa", "mamba"], "page_size": 1, "kv_size": 24, "sliding_window": 2,
          "swa_kv_size": 24, "mamba_size": 4, "session_radix_cache": True}
FULL = {"components": ["full"], "page_size": 1, "kv_size": 16, "session_radix_cache": True}


def run(config: dict, *steps: dict):
    return Runner(scenario_from_records({"schema": 1, "scenario": {"name": "t"}, "config": config},
                                        list(steps))).run()


def tagged(expect: dict) -> list[dict]:
    """s1 opens, r1 finishes in it (nodes #2 [1..4] above #1 [5, 6]), then ``expect``."""
    return [{"op": "session_open", "session": "s1"},
            {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4, 5, 6], "session": "s1"},
            {"op": "release", "req": "r1"},
            {"op": "insert", "key": [1, 2, 3, 4, 9, 9]},  # splits nothing new: #2 gains a sibling
            {"op": "check", "expect": expect}]


def test_refs_generations_and_leaves_read_after_the_step():
    timeline = run(HYBRID, *tagged({
        "full_session_ref": {"1": 1, "2": 1, "3": 0}, "swa_session_ref": {"1": 1, "2": 1},
        "mamba_session_ref": {"1": 1, "2": 0}, "sessions_open": ["s1"], "session_generations": {"s1": 1},
        "sessions_closed": [], "session_leaves": {"s1": {"full": [1], "swa": [1], "mamba": [1]}}}))
    assert timeline.passed, [str(f) for r in timeline.records for f in r.failures]


def test_a_wrong_expectation_fails_with_the_actual_value():
    timeline = run(HYBRID, *tagged({"full_session_ref": {"1": 2, "99": 0}, "session_generations": {"s1": 1, "s9": 1},
                                    "session_leaves": {"s1": {"full": [2]}, "s2": {}}, "sessions_open": []}))
    failures = {f.field: (f.expected, f.actual) for f in timeline.records[-1].failures}
    assert failures == {
        "full_session_ref": ({"1": 2, "99": 0}, {"1": 1, "99": "no node"}),
        "session_generations": ({"s1": 1, "s9": 1}, {"s1": 1, "s9": "not open"}),
        "session_leaves": ({"s1": {"full": [2]}, "s2": {}}, {"s1": {"full": [1], "swa": [1], "mamba": [1]}, "s2": {}}),
        "sessions_open": ([], ["s1"]),
    }


def test_a_close_leaves_a_tombstone_and_drops_the_refs():
    timeline = run(HYBRID, *tagged({}), {"op": "session_release", "session": "s1", "expect": {
        "sessions_open": [], "sessions_closed": ["s1"], "session_generations": {"s1": 1}}})
    failures = {f.field: f.actual for f in timeline.records[-1].failures}
    assert failures == {"session_generations": {"s1": "not open"}}
    closed = run(HYBRID, *tagged({}), {"op": "session_release", "session": "s1", "expect": {
        "sessions_open": [], "sessions_closed": ["s1"], "full_session_ref": {"1": 0, "2": 0},
        "session_leaves": {"s1": {}}}})
    assert closed.passed


def test_a_streaming_slot_is_expected_field_by_field():
    timeline = run(FULL,
                   {"op": "session_open", "session": "s2", "streaming": True},
                   {"op": "stream_turn", "req": "t1", "tokens": [1, 2, 3], "session": "s2",
                    "expect": {"session_slots": {"s2": {"holds_kv": True, "kv_committed_len": 3, "lock_node": 1,
                                                        "borrowed_by": ["t1"], "publishes_prompt": True}}}},
                   {"op": "release", "req": "t1",
                    "expect": {"session_slots": {"s2": {"borrowed_by": [], "publishes_prompt": False}}}},
                   {"op": "session_release", "session": "s2",
                    "expect": {"session_slots": {"s2": {"holds_kv": True}}, "sessions_open": []}})
    failures = [(r.index, f.field, f.actual) for r in timeline.records for f in r.failures]
    assert failures == [(4, "session_slots", {"s2": "no slot"})]


BAD = [
    ('full_session_ref = { x = 1 }', "'x' is not a node id or a token path", "expect.full_session_ref.x"),
    ('full_session_ref = { 3 = -1 }', "non-negative int", "expect.full_session_ref.3"),
    ('full_session_ref = {}', "must be a table {node = session_ref}", "expect.full_session_ref"),
    ('swa_session_ref = { 3 = 1 }', "swa_session_ref needs the swa component", "expect.swa_session_ref"),
    ('sessions_open = ["s2", "s1"]', 'list the open sessions in name order', "expect.sessions_open"),
    ('sessions_closed = ["s1", "s1"]', "a session is listed twice", "expect.sessions_closed"),
    ('sessions_closed = [1]', "a list of session ids", "expect.sessions_closed"),
    ('session_generations = { s1 = 0 }', "positive int", "expect.session_generations.s1"),
    ('session_generations = [1]', "must be a table {session_id = …} ({ s1 = 2 })", "expect.session_generations"),
    ('session_leaves = { s1 = { swa = [1] } }', "unknown component 'swa'", "expect.session_leaves.s1.swa"),
    ('session_leaves = { s1 = { full = [3, 1] } }', "ascending: [1, 3]", "expect.session_leaves.s1.full"),
    ('session_leaves = { s1 = { full = [] } }', "non-empty list", "expect.session_leaves.s1.full"),
    ('session_slots = { s1 = { kv_len = 3 } }', "unknown slot field 'kv_len'", "expect.session_slots.s1.kv_len"),
    ('session_slots = { s1 = { holds_kv = 1 } }', "holds_kv must be true or false", "expect.session_slots.s1.holds_kv"),
    ('session_slots = { s1 = { borrowed_by = [1] } }', "a list of request names", "expect.session_slots.s1.borrowed_by"),
]


@pytest.mark.parametrize("line, message, field", BAD)
def test_a_bad_expectation_names_the_file_line_and_field(tmp_path, line, message, field):
    path = tmp_path / "bad.toml"
    path.write_text('schema = 1\n[scenario]\nname = "b"\n[config]\ncomponents = ["full"]\npage_size = 1\n'
                    'kv_size = 16\nsession_radix_cache = true\n\n[[step]]\nop = "check"\n'
                    f'expect = {{ {line} }}\n')
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.line == 12 and info.value.field == field and message in info.value.message, str(info.value)


def test_the_refs_fields_need_the_session_radix_cache(tmp_path):
    for line in ('full_session_ref = { 1 = 0 }', 'sessions_closed = []', 'session_leaves = { s1 = {} }',
                 'session_generations = { s1 = 1 }'):
        path = tmp_path / "off.toml"
        path.write_text('schema = 1\n[scenario]\nname = "b"\n[config]\ncomponents = ["full"]\nkv_size = 16\n'
                        f'[[step]]\nop = "check"\nexpect = {{ {line} }}\n')
        with pytest.raises(ScenarioError, match=r"off.toml:9: .* needs the session radix cache"):
            load_scenario(path)
    path.write_text('schema = 1\n[scenario]\nname = "b"\n[config]\ncomponents = ["full"]\nkv_size = 16\n'
                    '[[step]]\nop = "check"\nexpect = { sessions_open = [], session_slots = { s1 = { holds_kv = true } } }\n')
    assert load_scenario(path).steps[0].expect["sessions_open"] == []


def test_a_faulted_fuzz_run_pins_the_sessions_its_twin_had():
    from workbench.model.fuzzing.fuzz import FuzzConfig, LockstepRun
    run_ = LockstepRun(FuzzConfig(("full",), 1, faults=("evictable-double-count",), sessions=True))
    run_.step({"op": "session_open", "session": "s1"})
    run_.step({"op": "session_release", "session": "s1"})
    expects = [step["expect"] for step in run_.steps]
    assert [(e["sessions_open"], e["sessions_closed"]) for e in expects] == [(["s1"], []), ([], ["s1"])]
    assert run_.runner.timeline.passed
