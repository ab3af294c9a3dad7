"""Everything the bridge compares is expectable, with nodes named by token path: each
new field passes on the cache's values and fails with the actual one on a wrong one;
a bad path is a file:line error; ``exact`` fails on a key the table leaves out; the
live command line, the writer and the regression export carry them."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from urc_util import assert_invalid, toml
from workbench.model.debugging.regression_test import regression_test_source
from workbench.model.scenarios.live import parse_command
from workbench.model.scenarios.live_format import format_command
from workbench.model.scenarios.scenario import ScenarioError, load_scenario, scenario_from_records
from workbench.model.scenarios.writer import scenario_toml
from workbench.model.timeline.runner import Runner

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "scenarios/against/expect-by-token-path.toml"
FULL = {"components": ["full"], "page_size": 1, "kv_size": 32}
SWA = {"components": ["full", "swa"], "page_size": 1, "kv_size": 32, "sliding_window": 2}


def run(config: dict, *steps: dict):
    return Runner(scenario_from_records({"schema": 1, "scenario": {"name": "t"}, "config": config},
                                        list(steps))).run()


def failures(timeline) -> list[tuple]:
    return [(r.index, f.field, f.actual) for r in timeline.records for f in r.failures]


def bundled_steps() -> list[dict]:
    return [dict(step.raw) for step in load_scenario(BUNDLED).steps]


def test_the_bundled_token_path_scenario_passes():
    timeline = Runner(load_scenario(BUNDLED)).run()
    assert timeline.passed, failures(timeline)
    expected = {key for step in load_scenario(BUNDLED).steps for key in step.expect}
    assert expected >= {"last_node_depth", "best_match_depth", "full_kv_hit_length", "full_value_len", "swa_value_len",
                        "hit_count", "priority", "full_evict_order", "request_state", "full_lock_ref", "swa_lock_ref",
                        "exact"}


# (step, field, a wrong expectation, what the step reads instead)
WRONG = [
    (1, "last_node_depth", 5, 6),
    (1, "full_value_len", {"[1 2 3 4]": 4}, {"[1 2 3 4]": 4, "[1..6]": 2}),  # exact: [5 6] is left out
    (2, "hit_count", {"[1 2 3]": 0}, {"[1 2 3]": 1}),
    (2, "priority", {"[1 2 3 9 10]": 0, "[1..6]": 0}, {"[1 2 3 9 10]": 2, "[1..6]": 0}),
    (3, "best_match_depth", 3, 5),
    (3, "full_kv_hit_length", 6, 5),
    (3, "full_evict_order", ["[1 2 3 9 10]", "[1..6]"], ["[1..6]", "[1..3 9 10]"]),
    (4, "swa_value_len", {"[1 2 3 4]": 1}, {"[1 2 3 4]": "tombstone"}),
    (4, "full_value_len", {"[1 2 3 4]": "tombstone", "[7]": 1}, {"[1 2 3 4]": 1, "[7]": "no node"}),
    (5, "request_state", {"r1": {"cache_protected_len": 4, "last_node": "[1 2 3]", "swa_evicted_seqlen": 0}},
     {"r1": {"cache_protected_len": 5, "last_node": "[1..3 9 10]", "swa_evicted_seqlen": 0}}),
    (5, "full_lock_ref", {"[1 2 3 9 10]": 1}, {"[1 2 3 9 10]": 1, "[1..3]": 1}),  # exact: the path lock's [1 2 3]
    (6, "request_state", {"r1": {"swa_evicted_seqlen": 5}}, {"r1": {"swa_evicted_seqlen": 6}}),
    (7, "request_state", {"r1": {"kv_committed_len": 9}}, {"r1": "not running"}),
]


@pytest.mark.parametrize("index, field, wrong, actual", WRONG, ids=[f"{i}-{f}" for i, f, *_ in WRONG])
def test_each_field_fails_on_a_wrong_value_with_what_the_cache_has(index, field, wrong, actual):
    steps = bundled_steps()
    steps[index - 1]["expect"] = {**steps[index - 1]["expect"], field: copy.deepcopy(wrong)}
    assert failures(run(load_scenario(BUNDLED).config, *steps)) == [(index, field, actual)]


def test_nodes_by_id_compare_as_the_same_nodes_by_path():
    timeline = run(FULL, {"op": "insert", "key": [1, 2, 3, 4]}, {"op": "insert", "key": [1, 2, 9]},
                   {"op": "check", "expect": {"full_value_len": {"[1 2]": 2},
                                              "full_lru": ["[1 2 9]", "[1 2 3 4]", "[1 2]"]}})
    assert timeline.passed, failures(timeline)
    state = timeline.state_after(3)
    ids = {state.path(n.id): n.id for n in state.non_root()}
    by_id = {"full_value_len": {str(ids[(1, 2)]): 2}, "full_lru": [ids[(1, 2, 9)], ids[(1, 2, 3, 4)], ids[(1, 2)]]}
    assert run(FULL, {"op": "insert", "key": [1, 2, 3, 4]}, {"op": "insert", "key": [1, 2, 9]},
               {"op": "check", "expect": by_id}).passed


def test_a_namespace_and_bigram_keys_are_part_of_the_path():
    timeline = run(FULL, {"op": "insert", "key": [1, 2, 3], "extra_key": "a"},
                   {"op": "insert", "key": [1, 2], "cache_salt": "s"},
                   {"op": "check", "expect": {"full_value_len": {
                       "[1 2 3] extra_key=a": 3, "[1 2 3]": "no node", "[1 2] cache_salt=s": 2,
                       "[1 2] extra_key=a cache_salt=s": "no node"}}})
    assert timeline.passed, failures(timeline)
    eagle = run({**FULL, "is_eagle": True}, {"op": "insert", "key": [1, 2, 3, 4, 5]},
                {"op": "insert", "key": [1, 2, 3, 9]},
                {"op": "check", "expect": {"full_value_len": {"[1 2 3]": 2, "[1 2 3 4 5]": 2, "[1 2 3 9]": 1},
                                           "exact": ["full_value_len"]}})
    assert eagle.passed, failures(eagle)  # 5 raw tokens make 4 pairs: [1 2 3] holds the pairs (1,2) (2,3)


def test_insert_reports_whether_mamba_had_the_state():
    config = {"components": ["full", "mamba"], "page_size": 1, "kv_size": 32, "mamba_size": 8}
    timeline = run(config, {"op": "insert", "key": [1, 2, 3], "expect": {"mamba_exist": False}},
                   {"op": "insert", "key": [1, 2, 3], "expect": {"mamba_exist": True, "last_node_depth": 3}},
                   {"op": "insert", "key": [1, 2, 3, 4], "expect": {"mamba_exist": True}})
    assert failures(timeline) == [(3, "mamba_exist", False)]


def test_host_copies_and_the_host_lru_by_path():
    config = {**SWA, "hicache": {"write_policy": "write_through"}}  # every node backed up as it is inserted
    timeline = run(config, {"op": "insert", "key": [1, 2, 3, 4]}, {"op": "insert", "key": [1, 2, 9]},
                   {"op": "evict", "swa": 1},
                   {"op": "check", "expect": {"full_host_len": {"[1 2 3 4]": 2, "[1 2 9]": 1, "[1 2]": 2},
                                              "exact": ["full_host_len"],
                                              "swa_value_len": {"[1..4]": "tombstone", "[1 2]": 2},
                                              "swa_host_len": {"[1..4]": 2}, "swa_host_lru": ["[1..4]"]}})
    assert timeline.passed, failures(timeline)


def test_session_refs_and_frontiers_by_path():
    config = {**FULL, "session_radix_cache": True}
    timeline = run(config, {"op": "session_open", "session": "s1"},
                   {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4], "session": "s1"},
                   {"op": "release", "req": "r1"},
                   {"op": "check", "expect": {"full_session_ref": {"[1..4]": 1}, "exact": ["full_session_ref"],
                                              "session_leaves": {"s1": {"full": ["[1 2 3 4]"]}}}},
                   {"op": "insert", "key": [1, 2, 9]},
                   {"op": "check", "expect": {"full_session_ref": {"[1 2]": 1}, "exact": ["full_session_ref"]}})
    assert failures(timeline) == [(6, "full_session_ref", {"[1 2]": 1, "[1..4]": 1})]  # the split's lower half too


# ---- exact -------------------------------------------------------------------------------------------------
def test_exact_fails_when_a_key_it_leaves_out_has_a_value():
    steps = [{"op": "insert", "key": [1, 2, 3]}, {"op": "match", "key": [1, 2, 3], "as": "m"},
             {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4]},
             {"op": "req_prefill", "req": "r2", "tokens": [7, 8]}]
    partial = run(FULL, *steps, {"op": "check", "expect": {
        "full_lock_ref": {"m": 1}, "request_state": {"r1": {"kv_committed_len": 4}}}})
    assert partial.passed, failures(partial)
    closed = run(FULL, *steps, {"op": "check", "expect": {
        "full_lock_ref": {"m": 1}, "request_state": {"r1": {"kv_committed_len": 4}},
        "exact": ["full_lock_ref", "request_state"]}})
    assert failures(closed) == [
        (5, "request_state", {"r1": {"kv_committed_len": 4}, "r2": {"kv_committed_len": 2}})]
    nothing = run(FULL, {"op": "insert", "key": [1, 2]},
                  {"op": "check", "expect": {"full_lock_ref": {}, "hit_count": {"[1 2]": 1},  # the insert's hit
                                             "exact": ["full_lock_ref", "hit_count"]}},
                  {"op": "match", "key": [1, 2], "as": "m"},
                  {"op": "lock", "match": "m", "as": "l"},
                  {"op": "check", "expect": {"full_lock_ref": {}, "exact": ["full_lock_ref"]}})
    assert failures(nothing) == [(5, "full_lock_ref", {"[1 2]": 1})]


def test_exact_closes_a_session_table():
    config = {**FULL, "session_radix_cache": True}
    timeline = run(config, {"op": "session_open", "session": "s1"}, {"op": "session_open", "session": "s2"},
                   {"op": "check", "expect": {"session_generations": {"s1": 1}, "exact": ["session_generations"]}})
    assert failures(timeline) == [(3, "session_generations", {"s1": 1, "s2": 2})]


# ---- bad input -----------------------------------------------------------------------------------------------
BAD = [
    ('full_value_len = { "[1 x]" = 1 }', "'x' in path '[1 x]' is not a token id", 'expect.full_value_len.[1 x]'),
    ('full_value_len = { "[1 2" = 1 }', "is not a node id or a token path", 'expect.full_value_len.[1 2'),
    ('full_value_len = { "[3..1]" = 1 }', "a run goes upwards", 'expect.full_value_len.[3..1]'),
    ('full_value_len = { "[1] lora=a" = 1 }', "extra_key=NS and cache_salt=SALT", 'expect.full_value_len.[1] lora=a'),
    ('full_value_len = { "[1]" = "gone" }', "'tombstone' or 'no node'", 'expect.full_value_len.[1]'),
    ('full_value_len = {}', "an empty one only with exact", "expect.full_value_len"),
    ('full_lock_ref = { x = 1 }', "unknown match name 'x'", "expect.full_lock_ref"),
    ('hit_count = { "[1]" = -1 }', "non-negative int", "expect.hit_count.[1]"),
    ('swa_value_len = { "[1]" = 1 }', "swa_value_len needs the swa component", "expect.swa_value_len"),
    ('full_host_len = { "[1]" = 1 }', "needs the host tier", "expect.full_host_len"),
    ('full_host_lru = []', "Full keeps no host LRU list", "expect.full_host_lru"),
    ('full_evict_order = ["[1]", "1 2"]', "'1 2' is not a node id", "expect.full_evict_order[1]"),
    ('full_evict_order = 3', "a list of nodes", "expect.full_evict_order"),
    ('request_state = { r9 = { kv_committed_len = 1 } }', "unknown request 'r9'", "expect.request_state.r9"),
    ('request_state = { r1 = { kv_len = 1 } }', "unknown request field 'kv_len'", "expect.request_state.r1.kv_len"),
    ('request_state = { r1 = { last_node = "[1" } }', "is not a node id", "expect.request_state.r1.last_node"),
    ('request_state = { r1 = { swa_evicted_seqlen = 0 } }', "unknown request field", "expect.request_state.r1.swa_evicted_seqlen"),
    ('exact = "full_lock_ref"', "exact must be a list", "expect.exact"),
    ('exact = ["nodes"], nodes = 1', "'nodes' is not a table field", "expect.exact"),
    ('exact = ["full_value_len"]', "exact names full_value_len, which this step does not expect", "expect.exact"),
]


@pytest.mark.parametrize("line, message, field", BAD, ids=[b[2] + "-" + str(i) for i, b in enumerate(BAD)])
def test_a_bad_expectation_is_a_file_line_error(tmp_path, monkeypatch, capsys, line, message, field):
    monkeypatch.chdir(tmp_path)
    path = toml("bad.toml", '[[step]]\nop = "req_prefill"\nreq = "r1"\ntokens = [1]\n'
                            f'[[step]]\nop = "check"\nexpect = {{ {line} }}\n')
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert (info.value.line, info.value.field) == (15, field) and message in info.value.message, str(info.value)
    assert_invalid(capsys, ["run", path], "bad.toml:15", field=field if len(field) <= 40 else None, says=message)


# ---- the live command line, the writer, the export --------------------------------------------------------
def test_live_expect_words_take_paths_orders_and_exact():
    raw = parse_command('check expect full_value_len.[1,2]=2 full_value_len."[1..3] extra_key=a"=tombstone '
                        'full_evict_order=[[1..3],[1,2,9],4] exact=[full_value_len] request_state.r1.last_node="[1 2]"')
    assert raw["expect"] == {"full_value_len": {"[1 2]": 2, "[1..3] extra_key=a": "tombstone"},
                             "full_evict_order": ["[1..3]", "[1 2 9]", 4], "exact": ["full_value_len"],
                             "request_state": {"r1": {"last_node": "[1 2]"}}}
    assert parse_command(format_command(raw)) == raw
    closed = parse_command("check expect full_lock_ref={} exact=[full_lock_ref]")
    assert closed["expect"] == {"full_lock_ref": {}, "exact": ["full_lock_ref"]}
    assert parse_command(format_command(closed)) == closed


def test_a_written_scenario_keeps_paths_and_exact(tmp_path):
    scenario = load_scenario(BUNDLED)
    written = tmp_path / "again.toml"
    written.write_text(scenario_toml(scenario), encoding="utf-8")
    again = load_scenario(written)
    assert [s.expect for s in again.steps] == [s.expect for s in scenario.steps]
    assert Runner(again).run().passed


def test_an_export_pins_what_a_node_table_read():
    timeline = run(FULL, {"op": "insert", "key": [1, 2, 3]},
                   {"op": "check", "expect": {"full_value_len": {"[1 2 3]": 2, "[9]": 1}, "full_lru": ["[9]"]}})
    source = regression_test_source(timeline, 2)
    assert 'full_value_len = { "[1 2 3]" = 3, "[9]" = "no node" }' in source
    assert 'full_lru = ["[1..3]"]' in source


def test_the_docs_list_the_fields_the_registry_makes():
    from workbench.model.scenarios.node_fields import reference_table

    text = (ROOT / "docs" / "reference" / "ops.md").read_text(encoding="utf-8")
    assert reference_table() in text, "regenerate it: make docs (python tools/gen_reference.py)"


def test_each_declared_request_field_is_one_a_running_request_shows():
    from cache.components import COMPONENT_REGISTRY

    config = {"components": ["full", "swa", "mamba"], "page_size": 1, "kv_size": 32, "sliding_window": 2,
              "mamba_size": 8}
    timeline = run(config, {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4],
                            "expect": {"request_state": {"r1": {"swa_evicted_seqlen": 0, "kv_committed_len": 4}}}})
    assert timeline.passed, failures(timeline)
    (view,) = timeline.state_after(1).requests
    declared = {(c, f) for c in config["components"] for f in COMPONENT_REGISTRY.declared(c, "REQUEST_FIELDS", ())}
    assert declared == {("swa", "evicted_seqlen"), ("mamba", "last_track_seqlen")}
    assert all(f in view.component(c) for c, f in declared)
