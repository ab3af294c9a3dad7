"""The headless runner and its CLI: expectations, the report, ``--json`` / ``--states`` /
``--record``, truncated traces, ``urc show``, ``urc bench --trace``, the timeline, and
scenario files being data only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from urc_util import HEADER, JSONL_HEADER, jsonl, run_json, toml, urc, write
from workbench.model.timeline.runner import Runner, run_scenario
from workbench.model.scenarios.scenario import ScenarioError, load_scenario

SMOKE = Path(__file__).resolve().parents[2] / "scenarios" / "smoke.toml"
# A frozen copy of scenarios/smoke.toml, so the line numbers below stay put.
SMOKE_TEXT = '''\
schema = 1

[scenario]
name = "smoke"
description = "A minimal Full-only run"

[config]
components = ["full"]
kv_size = 64

[[step]]
op = "insert"
key = [1, 2, 3, 4, 5, 6]
expect = { prefix_len = 0, nodes = 1 }

[[step]]
op = "match"
key = [1, 2, 3, 9]
as = "m"
expect = { prefix_len = 3, nodes = 2 }

[[step]]
op = "lock"
match = "m"
as = "l"
expect = { full_lock_ref = { m = 1 }, full_protected = 3 }

[[step]]
op = "unlock"
lock = "l"

[[step]]
op = "unlock"
lock = "l"
expect_error = "not held"
'''


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def smoke() -> str:
    return write("smoke.toml", SMOKE_TEXT)


def test_the_shipped_smoke_scenario_passes(capsys):
    shutil.copy(SMOKE, "shipped.toml")
    rc, out, err = urc(capsys, "run", "shipped.toml")
    assert (rc, err) == (0, "") and out.startswith("PASS shipped.toml")


# A walk through every expectable field; the values were derived by hand (see comments).
# (op fields, {field: value}); lines: each step is 4 lines long + its expect line.
FLOW = [
    ('op = "insert"\nkey = [1, 2, 3, 4, 5, 6]', dict(prefix_len=0, nodes=1, full_evictable=6, full_available=58,
                                                     full_protected=0, evictable_leaves=1)),
    ('op = "match"\nkey = [1, 2, 3, 9]\nas = "m"', dict(prefix_len=3, host_hit_length=0, nodes=2)),  # splits 3|3
    ('op = "lock"\nmatch = "m"\nas = "l"', dict(full_lock_ref={"m": 1}, full_protected=3, full_evictable=3)),
    ('op = "req_prefill"\nreq = "r"\ntokens = [1, 2, 3, 4, 7, 8]',  # matches 4 (splits [4 5 6]), holds 7 8
     dict(prefix_len=4, nodes=3, requests=1, full_held=2, full_available=56, full_lock_ref={"m": 2})),
    ('op = "unlock"\nlock = "l"', dict(full_lock_ref={"m": 1}, full_protected=4, full_evictable=2)),
    ('op = "evict"\nfull = 100', dict(full_evicted=2, swa_evicted=0, nodes=2, evictable_leaves=0)),  # only [5 6]
    ('op = "req_finish"\nreq = "r"', dict(requests=0, full_held=0, full_protected=0, nodes=3, full_evictable=6)),
    ('op = "check"', dict(full_lock_ref={"m": 0}, full_available=58, swa_tombstones=0)),
]


def flow_text(override: dict[tuple[int, str], object] = {}) -> str:
    parts = []
    for i, (fields, expect) in enumerate(FLOW):
        exp = {k: override.get((i, k), v) for k, v in expect.items()}
        parts.append(f"[[step]]\n{fields}\nexpect = {toml_table(exp)}\n")
    return "".join(parts)


def toml_table(d: dict) -> str:
    return "{ " + ", ".join(f"{k} = {toml_table(v) if isinstance(v, dict) else v}" for k, v in d.items()) + " }"


def flow_lines() -> list[int]:
    lines, line = [], 9
    for fields, _ in FLOW:
        lines.append(line)
        line += 2 + fields.count("\n") + 1
    return lines


# ---- expectations ------------------------------------------------------------------------------


def test_every_expectation_holds(capsys):
    f = toml("flow.toml", flow_text())
    rc, out, err = urc(capsys, "run", f)
    assert (rc, err) == (0, ""), out
    assert out.startswith("PASS flow.toml")


@pytest.mark.parametrize("i, field", [(i, k) for i, (_, exp) in enumerate(FLOW) for k in exp])
def test_each_expectation_can_fail(capsys, i, field):
    good = FLOW[i][1][field]
    bad = {"m": good["m"] + 1} if isinstance(good, dict) else good + 1
    f = toml("flow.toml", flow_text({(i, field): bad}))
    rc, report = run_json(capsys, f)
    assert rc == 1 and report[0]["passed"] is False
    failing = [s for s in report[0]["steps"] if s["failures"]]
    assert [s["index"] for s in failing] == [i + 1]
    assert failing[0]["line"] == flow_lines()[i]
    assert failing[0]["failures"] == [{"field": field, "expected": bad, "actual": good}]


def test_report_lists_every_failing_step_with_its_line_and_command(capsys):
    f = toml("flow.toml", flow_text({(1, "prefix_len"): 7, (4, "full_protected"): 9}))
    rc, out, err = urc(capsys, "run", f)
    assert rc == 1 and err == ""
    assert out.startswith("FAIL flow.toml")
    assert out.splitlines()[0] == f"FAIL flow.toml — t ({len(flow_lines())} steps, 2 failed)"
    line1, line4 = flow_lines()[1], flow_lines()[4]
    assert f"step 2 (flow.toml:{line1}) match(key=[1 2 3 9], as=m)" in out
    assert f"step 5 (flow.toml:{line4}) unlock(lock=l)" in out
    assert "prefix_len: expected 7, got 3" in out and "full_protected: expected 9, got 4" in out
    assert "urc show flow.toml --step 2" in out and "urc show flow.toml --step 5" in out


def test_report_shows_violations(capsys, monkeypatch):
    """Invariants are checked after every step, fingerprints after every match."""
    import workbench.model.timeline.runner as runner
    from cache.checks.invariants import Violation

    calls = []

    def fake_verify(cache, key, result):
        calls.append(key.token_ids)
        return [Violation("fingerprint.kv", f"bad kv for {key.token_ids}")]

    monkeypatch.setattr(runner, "verify_match", fake_verify)
    f = toml("flow.toml", flow_text())
    rc, report = run_json(capsys, f)
    assert rc == 1 and calls == [[1, 2, 3, 9]]
    violations = [s["violations"] for s in report[0]["steps"]]
    assert violations[1] == [{"name": "fingerprint.kv", "message": "bad kv for [1, 2, 3, 9]"}]
    assert all(v == [] for j, v in enumerate(violations) if j != 1)
    assert all(s["failures"] == [] for s in report[0]["steps"])

    real = runner.check_invariants
    monkeypatch.setattr(runner, "verify_match", lambda *a: [])
    monkeypatch.setattr(runner, "check_invariants",
                        lambda cache, touched=None, data_touched=None: [Violation("counter.evictable", "off by one")]
                        if len(cache.tree.nodes) > 3 else real(cache, touched, data_touched))
    rc, out, _ = urc(capsys, "run", f)
    assert rc == 1
    assert f"step 4 (flow.toml:{flow_lines()[3]})" in out
    assert "invariant counter.evictable: off by one" in out


# ---- --json -----------------------------------------------------------------------------------

STEP_KEYS = {"index", "line", "op", "result", "failures", "violations", "events"}


def test_json_shape(capsys, smoke):
    rc, report = run_json(capsys, smoke)
    assert rc == 0 and isinstance(report, list) and len(report) == 1
    (entry,) = report
    assert set(entry) == {"file", "scenario", "passed", "steps", "final_state"}
    assert (entry["file"], entry["scenario"], entry["passed"]) == ("smoke.toml", "smoke", True)
    steps = entry["steps"]
    assert [(s["index"], s["line"], s["op"]) for s in steps] == [
        (1, 11, "insert"), (2, 16, "match"), (3, 22, "lock"), (4, 28, "unlock"), (5, 32, "unlock")]
    for s in steps[:4]:
        assert set(s) == STEP_KEYS
    assert set(steps[4]) == STEP_KEYS | {"error"} and "not held" in steps[4]["error"]
    assert steps[0]["result"] == {"prefix_len": 0, "last_node_depth": 6}  # the JSON keeps every result
    assert steps[1]["result"]["prefix_len"] == 3
    assert steps[2]["result"] is None and steps[4]["result"] is None
    assert all(s["failures"] == [] and s["violations"] == [] for s in steps)
    assert steps[0]["events"] and all(isinstance(e, dict) and "kind" in e for e in steps[0]["events"])
    final = entry["final_state"]
    assert set(final) == {"nodes", "lru", "pools", "metrics"}
    assert final["lru"] == {}
    # smoke: one 6-token insert, then match [1, 2, 3, 9] (3 on the device, 1 missed)
    assert {k: v for k, v in final["metrics"].items() if v} == {"matches": 1, "device_hit_tokens": 3, "miss_tokens": 1}
    assert final["pools"] == {"full": {"total": 64, "available": 58, "evictable": 6, "protected": 0}}
    assert final["nodes"] == [
        {"path": [1, 2, 3], "key": [1, 2, 3], "components": {"full": {"len": 3, "lock_ref": 0}}},
        {"path": [1, 2, 3, 4, 5, 6], "key": [4, 5, 6], "components": {"full": {"len": 3, "lock_ref": 0}}},
    ]


def test_json_nodes_depth_first_children_by_first_token(capsys):
    inserts = [[5, 6], [3], [1, 2, 9], [1, 2, 3, 4], [1, 2, 0]]  # not in sorted order
    f = toml("t.toml", "".join(f'[[step]]\nop = "insert"\nkey = {k}\n' for k in inserts))
    rc, report = run_json(capsys, f)
    assert rc == 0
    nodes = report[0]["final_state"]["nodes"]
    assert [n["path"] for n in nodes] == [[1, 2], [1, 2, 0], [1, 2, 3, 4], [1, 2, 9], [3], [5, 6]]
    assert [n["key"] for n in nodes] == [[1, 2], [0], [3, 4], [9], [3], [5, 6]]
    assert all(n["path"] for n in nodes)  # the root is left out
    assert report[0]["final_state"]["pools"]["full"]["evictable"] == 9


def test_json_with_a_failing_and_a_passing_file(capsys, smoke):
    f = toml("flow.toml", flow_text({(0, "nodes"): 5}))
    rc, report = run_json(capsys, smoke, f)
    assert rc == 1
    assert [(r["file"], r["passed"]) for r in report] == [("smoke.toml", True), ("flow.toml", False)]
    assert report[1]["steps"][0]["failures"] == [{"field": "nodes", "expected": 5, "actual": 1}]


def test_states_adds_the_state_after_every_step(capsys, smoke):
    _, plain = run_json(capsys, smoke)
    assert all("state" not in s for s in plain[0]["steps"])
    rc, report = run_json(capsys, smoke, extra=("--full-states",))
    assert rc == 0
    steps = report[0]["steps"]
    assert all(set(s) - {"error"} == STEP_KEYS | {"state"} for s in steps)
    assert steps[-1]["state"] == report[0]["final_state"] == plain[0]["final_state"]
    assert [len(s["state"]["nodes"]) for s in steps] == [1, 2, 2, 2, 2]
    assert [s["state"]["pools"]["full"]["protected"] for s in steps] == [0, 0, 3, 0, 0]
    assert [{k: v for k, v in s.items() if k != "state"} for s in steps] == plain[0]["steps"]


# ---- --record ---------------------------------------------------------------------------------


def test_record_writes_header_and_one_line_per_step_and_replays(capsys, smoke):
    rc, out, _ = urc(capsys, "run", "--record", "out.jsonl", smoke)
    assert rc == 0 and "PASS" in out
    lines = Path("out.jsonl").read_text().splitlines()
    assert len(lines) == 1 + 5
    assert json.loads(lines[0]) == {
        "schema": 1,
        "scenario": {"name": "smoke", "description": "A minimal Full-only run"},
        "config": {"components": ["full"], "kv_size": 64},
    }
    assert json.loads(lines[1]) == {"op": "insert", "key": [1, 2, 3, 4, 5, 6], "expect": {"prefix_len": 0, "nodes": 1}}
    assert json.loads(lines[5]) == {"op": "unlock", "lock": "l", "expect_error": "not held"}
    _, original = run_json(capsys, smoke)
    rc, replay = run_json(capsys, "out.jsonl")
    assert rc == 0
    assert replay[0]["final_state"] == original[0]["final_state"]
    assert [s["line"] for s in replay[0]["steps"]] == [2, 3, 4, 5, 6]
    assert [s["result"] for s in replay[0]["steps"]] == [s["result"] for s in original[0]["steps"]]


def test_record_a_failing_run_keeps_every_executed_step(capsys):
    f = toml("flow.toml", flow_text({(2, "full_protected"): 0}))
    rc, _, _ = urc(capsys, "run", "--record", "out.jsonl", f)
    assert rc == 1
    assert len(Path("out.jsonl").read_text().splitlines()) == 1 + len(FLOW)
    _, original = run_json(capsys, f)
    rc, replay = run_json(capsys, "out.jsonl")
    assert rc == 1 and replay[0]["final_state"] == original[0]["final_state"]
    assert [s["index"] for s in replay[0]["steps"] if s["failures"]] == [3]


def test_run_scenario_record(smoke):
    timeline = run_scenario(smoke, record="lib.jsonl")
    replay = run_scenario("lib.jsonl")
    assert len(replay) == len(timeline) == 5
    assert replay.state_after(5).nodes == timeline.state_after(5).nodes


def test_recording_twice_to_one_path_needs_force_and_still_replays(capsys, smoke):
    assert urc(capsys, "run", "--record", "out.jsonl", smoke)[0] == 0
    first = Path("out.jsonl").read_text()
    rc, out, err = urc(capsys, "run", "--record", "out.jsonl", smoke)
    assert rc == 2 and "file exists (use --force" in err and Path("out.jsonl").read_text() == first
    assert urc(capsys, "run", "--record", "out.jsonl", "--force", smoke)[0] == 0
    assert len(Path("out.jsonl").read_text().splitlines()) == 6
    assert urc(capsys, "run", "out.jsonl")[0] == 0


# ---- truncated traces ---------------------------------------------------------------------------


def truncated(capsys, smoke) -> str:
    urc(capsys, "run", "--record", "out.jsonl", smoke)
    text = Path("out.jsonl").read_text()
    last = text.rstrip("\n").rsplit("\n", 1)[1]
    Path("cut.jsonl").write_text(text.rstrip("\n")[: -len(last) // 2])  # mid-object, no newline
    return "cut.jsonl"


def test_truncated_last_line_loads_with_a_one_line_notice(capsys, smoke):
    cut = truncated(capsys, smoke)
    scenario = load_scenario(cut)
    assert [s.op for s in scenario.steps] == ["insert", "match", "lock", "unlock"]
    assert len(scenario.notices) == 1 and "cut.jsonl:6: dropped a truncated last line" in scenario.notices[0]
    rc, out, err = urc(capsys, "run", "--json", cut)
    assert err.splitlines() == ["note: cut.jsonl:6: dropped a truncated last line (an interrupted recording)"]
    report = json.loads(out)
    assert rc == 0 and len(report[0]["steps"]) == 4
    assert report[0]["final_state"]["pools"]["full"]["protected"] == 0


def test_a_complete_trace_loads_without_a_notice(capsys, smoke):
    urc(capsys, "run", "--record", "out.jsonl", smoke)
    Path("nonl.jsonl").write_text(Path("out.jsonl").read_text().rstrip("\n"))  # no final newline, but complete
    scenario = load_scenario("nonl.jsonl")
    assert len(scenario.steps) == 5 and scenario.notices == ()


# ---- urc show / urc bench -------------------------------------------------------------------------


def test_show_steps(capsys, smoke):
    rc, out, _ = urc(capsys, "show", smoke, "--step", "0")
    assert rc == 0 and out.startswith("config: full · page 1\nroot") and "[1 2 3" not in out
    rc, out, _ = urc(capsys, "show", smoke, "--step", "1")
    assert rc == 0 and "[1 2 3 4 5 6]" in out and "smoke.toml:11" in out
    rc, out, _ = urc(capsys, "show", smoke, "--step", "3")
    assert rc == 0 and "[1 2 3]" in out and "[4 5 6]" in out and "🔒1" in out
    rc, last, _ = urc(capsys, "show", smoke)
    assert rc == 0 and last == urc(capsys, "show", smoke, "--step", "5")[1] and "🔒" not in last


def test_show_walk(capsys, smoke):
    rc, out, _ = urc(capsys, "show", smoke, "--walk")
    assert rc == 0
    for line in (11, 16, 22, 28, 32):
        assert f"smoke.toml:{line}" in out
    f = toml("flow.toml", flow_text({(0, "nodes"): 2}))
    assert urc(capsys, "show", f, "--walk")[0] == 1


def test_bench_trace_counts_each_op(capsys):
    steps = [("insert", "key = [1, 2, 3]"), ("insert", "key = [1, 2, 4]"), ("match", "key = [1, 2]"),
             ("insert", "key = [7]"), ("match", "key = [9]"), ("check", ""), ("evict", "full = 1")]
    f = toml("b.toml", "".join(f'[[step]]\nop = "{op}"\n{body}\n' for op, body in steps))
    rc, out, err = urc(capsys, "bench", "--trace", f, "--json")
    assert rc == 0, err
    ops = json.loads(out)["ops"]
    assert {op: s["n"] for op, s in ops.items()} == {"insert": 3, "match": 2, "evict": 1}
    for op, s in ops.items():
        assert set(s) == {"n", "mean_us", "p50_us", "p99_us", "call_mean_us"}
        assert 0 < s["p50_us"] <= s["p99_us"] and s["mean_us"] > 0
        # the caller's path adds building the key from the step's list to the call
        assert s["mean_us"] >= s["call_mean_us"] if op in ("insert", "match") else s["mean_us"] == s["call_mean_us"]


@pytest.mark.parametrize("keys", ["array", "list"])
def test_bench_trace_builds_keys_from_the_container_asked_for(capsys, keys):
    """array('q') (what SGLang's scheduler holds; the default) or a list: the same ops and
    the same results, the report naming the container."""
    steps = [("insert", "key = [1, 2, 3]"), ("match", "key = [1, 2]"), ("insert", "key = [1, 2, 3, 4]")]
    f = toml("k.toml", "".join(f'[[step]]\nop = "{op}"\n{body}\n' for op, body in steps))
    argv = ["bench", "--trace", f, "--json"] + (["--keys", keys] if keys == "list" else [])
    rc, out, err = urc(capsys, *argv)
    assert rc == 0, err
    report = json.loads(out)
    assert report["keys"] == keys and report["errors"] == 0
    assert {op: s["n"] for op, s in report["ops"].items()} == {"insert": 2, "match": 1}


def test_bench_trace_counts_the_evictions_allocation_makes_as_evict(capsys, tmp_path):
    header = {"schema": 1, "scenario": {"name": "t"}, "config": {"components": ["full"], "kv_size": 8, "auto_evict": True}}
    steps = [{"op": "insert", "key": [1, 2, 3, 4, 5, 6]}, {"op": "insert", "key": [7, 8, 9, 10, 11, 12]},
             {"op": "match", "key": [7, 8], "as": "m"}, {"op": "lock", "match": "m", "as": "L"},
             {"op": "unlock", "lock": "L"}]
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(json.dumps(r) for r in [header, *steps]) + "\n")
    rc, out, err = urc(capsys, "bench", "--trace", str(trace), "--json")
    assert rc == 0, err
    ops = json.loads(out)["ops"]  # the second insert's allocation evicted the first key
    assert {op: s["n"] for op, s in ops.items()} == {"insert": 2, "match": 1, "evict": 1, "lock": 1, "unlock": 1}


def test_bench_trace_on_a_recording(capsys, smoke):
    urc(capsys, "run", "--record", "out.jsonl", smoke)
    rc, out, _ = urc(capsys, "bench", "--trace", "out.jsonl", "--json")
    assert rc == 0
    assert {op: s["n"] for op, s in json.loads(out)["ops"].items()} == {"insert": 1, "match": 1, "lock": 1, "unlock": 2}


# ---- the timeline ---------------------------------------------------------------------------------


def test_timeline_state_after(smoke):
    timeline = run_scenario(smoke)
    assert len(timeline) == 5 and timeline.passed and timeline.first_failure is None
    assert timeline.state_after(0) is timeline.initial
    assert [n.path for n in timeline.state_after(0).nodes[1:]] == []
    assert [n.path for n in timeline.state_after(1).nodes[1:]] == [(1, 2, 3, 4, 5, 6)]
    assert [n.path for n in timeline.state_after(2).nodes[1:]] == [(1, 2, 3), (1, 2, 3, 4, 5, 6)]
    assert timeline.state_after(3).pools["full"].protected == 3
    assert timeline.state_after(4).pools["full"].protected == 0
    assert timeline.state_after(5) is timeline.records[4].snapshot
    assert timeline.state_after(99) is timeline.records[-1].snapshot


def test_runner_steps_one_at_a_time(smoke):
    runner = Runner(load_scenario(smoke))
    assert not runner.done and len(runner.timeline) == 0
    first = runner.step()
    assert (first.index, first.step.op, first.result, first.passed) == (1, "insert", {"prefix_len": 0, "last_node_depth": 6}, True)
    assert runner.timeline.state_after(1) is first.snapshot
    timeline = runner.run()
    assert runner.done and len(timeline) == 5 and timeline.records[0] is first


def test_failing_timeline_first_failure():
    timeline = run_scenario(toml("flow.toml", flow_text({(3, "requests"): 4, (6, "nodes"): 1})))
    assert not timeline.passed
    assert timeline.first_failure.index == 4
    assert [str(f) for f in timeline.first_failure.failures] == ["requests: expected 4, got 1"]


# ---- scenario files are data -----------------------------------------------------------------------

PAYLOAD = "__import__('os').system('touch PWNED')"


@pytest.mark.parametrize(
    "text, field",
    [
        (HEADER.replace("kv_size = 64", f'kv_size = "{PAYLOAD}"'), "kv_size"),
        (HEADER + f'[[step]]\nop = "insert"\nkey = "{PAYLOAD}"\n', "key"),
        (HEADER + f'[[step]]\nop = "{PAYLOAD}"\n', "op"),
        (HEADER + f'[[step]]\nop = "check"\n"{PAYLOAD}" = 1\n', PAYLOAD),
        (HEADER + f'[[step]]\nop = "evict"\nfull = "{PAYLOAD}"\n', "full"),
        (HEADER.replace('components = ["full"]', f'components = ["full", "{PAYLOAD}"]'), None),
    ],
    ids=["config", "key", "op", "field-name", "evict", "component"],
)
def test_code_in_a_toml_file_is_only_data(capsys, text, field):
    write("evil.toml", text + '[[step]]\nop = "check"\n' if "[[step]]" not in text else text)
    rc, out, err = urc(capsys, "run", "evil.toml")
    assert rc == 2 and "Traceback" not in err
    if field is not None:
        assert f"(field {field!r})" in err
    assert not Path("PWNED").exists()


def test_code_in_a_jsonl_file_is_only_data(capsys):
    f = jsonl("evil.jsonl", {"op": "insert", "key": PAYLOAD})
    assert urc(capsys, "run", f)[0] == 2
    f = jsonl("evil.jsonl", {"op": "check"}, header={**JSONL_HEADER, "config": {"components": ["full"], "kv_size": PAYLOAD}})
    assert urc(capsys, "run", f)[0] == 2
    assert not Path("PWNED").exists()


def test_code_in_free_text_stays_text(capsys):
    text = HEADER.replace('name = "t"', f'name = "{PAYLOAD}"\ndescription = "{PAYLOAD}"')
    write("evil.toml", text + f'[[step]]\nop = "insert"\nkey = [1]\ndescription = "{PAYLOAD}"\n')
    rc, report = run_json(capsys, "evil.toml")
    assert rc == 0 and report[0]["scenario"] == PAYLOAD
    scenario = load_scenario("evil.toml")
    assert scenario.description == PAYLOAD and scenario.steps[0].description == PAYLOAD
    assert not Path("PWNED").exists()


def test_loading_never_evaluates(monkeypatch, smoke):
    import builtins

    def refuse(*a, **k):
        raise AssertionError("a scenario file was evaluated")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    assert len(load_scenario(smoke).steps) == 5
    with pytest.raises(ScenarioError):
        load_scenario(toml("e.toml", f'[[step]]\nop = "insert"\nkey = "{PAYLOAD}"\n'))
