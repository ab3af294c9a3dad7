"""The bridge against the real SGLang 0.5.23 cache. ``make bridge-test`` runs them in
``.venv-sglang`` (CPU torch, SGLang 0.5.23; CI runs it on every commit) with
URC_REQUIRE_SGLANG=1, which turns the skip below into a failure; ``make test`` has no
SGLang, so there they skip with the reason."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_util import requires_sglang

pytestmark = requires_sglang()

from urc_util import urc  # noqa: E402
from workbench.bridge.differential import ASSERTS, run_against  # noqa: E402
from workbench.bridge.sglang_env import BridgeError  # noqa: E402
from workbench.bridge.side_by_side import bench_against  # noqa: E402
from workbench.bridge.sglang_side import SGLangSide  # noqa: E402
from workbench.model.timeline.runner import run_scenario  # noqa: E402
from workbench.model.scenarios.scenario import load_scenario, scenario_from_records  # noqa: E402
from workbench.model.scenarios.workload import write_trace  # noqa: E402
from workbench.record import attach, detach  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "scenarios").rglob("*.toml"))


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_bundled_scenario_agrees_with_sglang(name):
    scenario = load_scenario(ROOT / name)
    report = run_against(scenario)
    if report.skipped:  # a component SGLang does not have: said, not hidden
        assert "sidecar" in name and "no 'sidecar' component" in report.skipped
        return
    assert report.agrees, (report.divergence.as_dict(), report.by_design)
    if report.stopped_at is not None:  # SGLang asserted mid-change, where the scenario says ours refuses
        assert "SGLang asserts here" in (scenario.steps[report.stopped_at - 1].expect_error or "")
        return
    not_sent = sum(len(n.steps) for n in report.by_design if n.what != ASSERTS)
    assert report.run + not_sent == report.steps
    assert report.states_compared == report.run and report.nodes_compared


def test_a_mamba_turn_past_its_cap_agrees_with_sglang_where_the_checker_flags_it():
    """SGLang's release cuts the record's KV at the cap but keeps its Mamba state: ours
    does the same (the state lands where the checker flags it, tests/sessions)."""
    report = run_against(load_scenario(ROOT / "tests/sessions/data/streaming-overshoot-keeps-mamba-state.toml"))
    assert report.agrees and report.states_compared == report.steps == 6


@pytest.mark.parametrize("name", ["scenarios/tour.toml", "scenarios/tour_swa.toml", "scenarios/tour_mamba.toml"])
def test_the_rust_core_agrees_on_results_and_pools(name):
    report = run_against(load_scenario(ROOT / name), core="rust")
    assert report.agrees and not report.nodes_compared
    assert any("Rust tree core" in note.reason for note in report.by_design)


@pytest.mark.parametrize("components", [("full",), ("full", "swa"), ("full", "mamba"), ("full", "swa", "mamba")])
def test_a_workload_trace_agrees_step_by_step(tmp_path, components):
    path = tmp_path / "w.jsonl"
    with path.open("w") as out:
        write_trace(out, 150, 3, components)
    report = run_against(load_scenario(path), every=10)
    assert report.agrees, report.divergence.as_dict()
    assert report.run == report.steps > 500


def _evict_one_leaf(session, step_index):
    if step_index == 6:
        session.cache.evict(__import__("cache").EvictParams(num_tokens=1))


def test_a_perturbed_side_is_caught_at_that_step():
    report = run_against(load_scenario(ROOT / "scenarios/tour.toml"), perturb=_evict_one_leaf)
    d = report.divergence
    assert d is not None and d.step == 6
    assert d.difference.field.startswith("pools.full.")  # the pool notices first
    report = run_against(load_scenario(ROOT / "scenarios/tour.toml"), core="rust", perturb=_evict_one_leaf)
    assert report.divergence is not None and report.divergence.step == 6


def _drop_a_host_copy(session, step_index):
    if step_index == 7:  # tour_hicache: everything was just evicted to the host
        session.cache.evict_host(4)


def test_the_host_tier_is_compared_after_every_step():
    scenario = load_scenario(ROOT / "scenarios/tour_hicache.toml")
    report = run_against(scenario)
    assert report.agrees and report.run == report.steps == report.states_compared == 9
    report = run_against(scenario, perturb=_drop_a_host_copy)
    d = report.divergence
    assert d is not None and d.step == 7 and d.difference.field == "host_pools.full.available"


def test_the_host_tier_runs_without_sglang_sizing_or_timing_warnings(caplog):
    from sglang.srt.mem_cache import l2_transfer

    l2_transfer._timing_events_supported.cache_clear()  # it warns once per process
    with caplog.at_level(logging.WARNING):
        assert run_against(load_scenario(ROOT / "scenarios/tour_hicache.toml")).agrees
    assert [r.getMessage() for r in caplog.records if r.name.startswith("sglang")] == []


def test_a_host_node_copy_is_compared_per_component():
    """Our side's host copy of one node is cut short (its pool untouched): the pools
    agree, the node's host length does not."""
    def perturb(session, step_index):
        if step_index == 7:
            cache = session.cache
            node = next(n for n in cache.tree.iter_nodes() if n.length > 1 and n.data[0].host_value is not None)
            node.data[0].host_value = node.data[0].host_value[:1]
    report = run_against(load_scenario(ROOT / "scenarios/tour_hicache.toml"), perturb=perturb)
    d = report.divergence
    assert d is not None and d.step == 7 and d.difference.field == "node.full.host_len"


def test_a_host_size_one_ratio_cannot_give_is_refused_in_one_line():
    steps = [{"op": "insert", "key": [1, 2, 3]}]
    scenario = scenario_from_records({"schema": 1, "scenario": {"name": "ratio"}, "config": {
        "components": ["full", "mamba"], "kv_size": 32, "mamba_size": 4,
        "hicache": {"write_policy": "write_through", "host_kv_size": 65, "host_mamba_size": 5}}}, steps)
    with pytest.raises(BridgeError, match="one hicache_ratio: .* mamba host pool holds 9, ours 5"):
        run_against(scenario)


def _record(scenario, path) -> int:
    """Drive a real SGLang cache through a scenario's calls (requests, evictions,
    locks) with the recorder attached; returns the steps SGLang refused."""
    side = SGLangSide.for_scenario(scenario)
    attach(side.cache, path)
    refused = 0
    try:
        for step in scenario.steps:
            try:
                side.run(step.op, step.fields)
            except Exception:
                refused += 1
    finally:
        detach(side.cache)
    return refused


@pytest.mark.parametrize("name", ["scenarios/tour.toml", "scenarios/tour_swa.toml", "scenarios/tour_mamba.toml",
                                  "scenarios/bugs/sglang-35821-empty-cache-len-ghost-node.toml"])
def test_a_recording_of_the_real_cache_replays_on_ours(tmp_path, name):
    path = tmp_path / "rec.jsonl"
    _record(load_scenario(ROOT / name), path)
    recorded = load_scenario(path)
    assert recorded.config["components"] == load_scenario(ROOT / name).config["components"]
    timeline = run_scenario(recorded)  # every recorded result and tree size holds on ours
    assert timeline.passed, [(r.step.index, [str(f) for f in r.failures]) for r in timeline.records if not r.passed]
    assert any(s.op in ("lock", "req_prefill") for s in recorded.steps) and any(s.op == "evict" for s in recorded.steps)
    report = run_against(recorded)
    assert report.agrees, report.divergence.as_dict()


@pytest.mark.parametrize("components", [("full", "swa"), ("full", "swa", "mamba")])
def test_a_recording_of_a_random_workload_replays_on_ours(tmp_path, components):
    trace = tmp_path / "w.jsonl"
    with trace.open("w") as out:
        write_trace(out, 120, 5, components)
    _record(load_scenario(trace), tmp_path / "rec.jsonl")
    recorded = load_scenario(tmp_path / "rec.jsonl")
    ops = [s.op for s in recorded.steps]
    assert ops.count("match") == ops.count("insert") == 120
    if "mamba" not in components:  # with Mamba most matches end on the root (no state there): nothing to lock
        assert ops.count("lock") == ops.count("unlock") > 60
    assert run_scenario(recorded).passed


REQUEST_LIFE = [{"op": "insert", "key": [1, 2, 3]},
                {"op": "req_prefill", "req": "a", "tokens": [1, 2, 3, 4, 5]},
                {"op": "req_decode", "req": "a", "tokens": [6, 7], "slide_window": True},
                {"op": "checkpoint", "req": "a"},
                {"op": "req_prefill", "req": "b", "tokens": [1, 2, 9]},
                {"op": "req_decode", "req": "a", "tokens": [8]},
                {"op": "release", "req": "a"},
                {"op": "req_decode", "req": "b", "tokens": [10, 11]},
                {"op": "release", "req": "b", "insert": False}]


def _final(timeline):
    state = timeline.final
    return sorted(state.path(n.id) for n in state.nodes), state.pools


@pytest.mark.parametrize("components", [("full",), ("full", "swa"), ("full", "mamba"), ("full", "swa", "mamba")])
def test_a_recording_of_requests_replays_as_request_ops(tmp_path, capsys, components):
    """Requests driven on the real cache (SGLang's own match_kv_cache, lock, checkpoint and
    release_kv_cache) come back as the request ops, not as their tree calls."""
    steps = [dict(s) for s in REQUEST_LIFE]
    if "swa" not in components:
        del steps[2]["slide_window"]
    scenario = scenario_from_records({"schema": 1, "scenario": {"name": "life"}, "config": {
        "components": list(components), "kv_size": 64, "sliding_window": 4, "mamba_size": 8}}, steps)
    assert _record(scenario, tmp_path / "rec.jsonl") == 0
    recorded = load_scenario(tmp_path / "rec.jsonl")
    assert [(s.op, s.fields.get("req")) for s in recorded.steps if s.op not in ("insert", "match")] == [
        ("req_prefill", "r1"), ("req_decode", "r1"), ("checkpoint", "r1"), ("req_prefill", "r2"),
        ("req_decode", "r1"), ("release", "r1"), ("req_decode", "r2"), ("release", "r2")]
    assert recorded.steps[-1].fields.get("insert") is False
    replay = run_scenario(recorded)
    assert replay.passed, [(r.step.index, [str(f) for f in r.failures]) for r in replay.records if not r.passed]
    assert _final(replay) == _final(run_scenario(scenario))  # the same tree and pools as the session recorded
    rc, out, err = urc(capsys, "run", "--against", "sglang", str(tmp_path / "rec.jsonl"))
    assert rc == 0 and f"agrees with SGLang 0.5.23 (python tree core): {len(recorded.steps)} step(s) run on both" in out, err


def test_the_recorder_detaches_cleanly_and_writes_whole_lines(tmp_path):
    side = SGLangSide({"components": ["full"], "kv_size": 64})
    before = side.cache.match_prefix
    recorder = attach(side.cache, tmp_path / "t.jsonl")
    with pytest.raises(RuntimeError, match="already being recorded"):
        attach(side.cache, tmp_path / "u.jsonl")
    side.run("insert", {"key": [1, 2, 3]})
    with pytest.raises(AttributeError):  # SGLang refuses a receipt-less release: a comment, not a step
        side.cache.dec_lock_ref(side.cache.root_node_handle(), None)
    detach(side.cache)
    assert side.cache.match_prefix == before and recorder.written == 1
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["config"] == {"components": ["full"], "page_size": 1, "kv_size": 64, "auto_evict": True}
    assert json.loads(lines[1])["op"] == "insert" and lines[2].startswith("# dec_lock_ref raised")


def test_the_launcher_records_every_cache_a_process_builds(tmp_path):
    script = tmp_path / "drive.py"
    script.write_text(
        "from workbench.bridge.sglang_side import SGLangSide\n"
        "for _ in range(2):\n"
        "    side = SGLangSide({'components': ['full'], 'kv_size': 64})\n"
        "    side.run('insert', {'key': [1, 2, 3, 4]})\n"
        "    side.run('match', {'key': [1, 2, 3, 4, 5]})\n")
    proc = subprocess.run([sys.executable, "-m", "workbench.record", "-o", "live.jsonl", "--", sys.executable,
                           str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("live.jsonl", "live.2.jsonl"):
        recorded = load_scenario(tmp_path / name)
        assert [s.op for s in recorded.steps] == ["insert", "match"]
        assert run_scenario(recorded).passed


def test_urc_run_against_sglang_text_and_json(capsys):
    rc, out, err = urc(capsys, "run", "--against", "sglang", str(ROOT / "scenarios/tour_swa.toml"),
                       str(ROOT / "scenarios/tour_sidecar.toml"))
    assert rc == 0, err
    assert "agrees with SGLang 0.5.23 (python tree core)" in out and "no 'sidecar' component" in out
    rc, out, err = urc(capsys, "run", "--against", "sglang", "--json", "--sglang-core", "rust",
                       str(ROOT / "scenarios/smoke.toml"))
    report = json.loads(out)[0]
    assert rc == 0 and report["agrees"] and report["core"] == "rust" and not report["nodes_compared"]


def test_bench_against_sglang_reports_every_op_for_both_cores():
    steps = [{"op": "insert", "key": list(range(i, i + 40))} for i in range(0, 400, 40)]
    steps += [{"op": "match", "key": list(range(0, 40)), "as": "m"}, {"op": "lock", "match": "m", "as": "L"},
              {"op": "unlock", "lock": "L"}, {"op": "evict", "full": 80}]
    scenario = scenario_from_records({"schema": 1, "scenario": {"name": "b"},
                                      "config": {"components": ["full"], "kv_size": 1024}}, steps)
    report = bench_against(scenario)
    assert set(report["cores"]) == {"python", "rust"}
    for core in ("python", "rust"):
        assert set(report["cores"][core]) >= {"insert", "match", "lock", "unlock", "evict"}
        assert report["cores"][core]["insert"]["n"] == 10
        assert all(ratio is not None and ratio > 0 for ratio in report["ratio"][core].values())


def test_a_refused_decode_keeps_the_request_page_tail_on_both_sides():
    """Page 4, a full pool: a decode that cannot get a page is refused on both sides and
    must leave the request's part-used last page for the next decode."""
    steps = [{"op": "req_prefill", "req": "a", "tokens": list(range(1, 7))},
             {"op": "req_prefill", "req": "b", "tokens": list(range(100, 108))},
             {"op": "req_decode", "req": "a", "tokens": list(range(50, 58))},
             {"op": "req_decode", "req": "a", "tokens": [60]},
             {"op": "req_decode", "req": "a", "tokens": [61]},
             {"op": "req_finish", "req": "a"}, {"op": "req_finish", "req": "b"}]
    scenario = scenario_from_records({"schema": 1, "scenario": {"name": "tail"},
                                      "config": {"components": ["full"], "page_size": 4, "kv_size": 16}}, steps)
    report = run_against(scenario)
    assert report.agrees, report.divergence.as_dict()
    assert report.run == len(steps)


def test_a_second_window_release_is_recorded_as_a_comment(tmp_path):
    side = SGLangSide({"components": ["full", "swa"], "kv_size": 64, "sliding_window": 4})
    attach(side.cache, tmp_path / "t.jsonl")
    side.run("insert", {"key": list(range(1, 13))})
    side.run("match", {"key": list(range(1, 13)), "as": "m"})
    side.run("lock", {"match": "m", "as": "L"})
    side.run("release_window", {"lock": "L"})
    side.run("release_window", {"lock": "L"})  # SGLang does nothing the second time
    side.run("unlock", {"lock": "L"})
    detach(side.cache)
    recorded = load_scenario(tmp_path / "t.jsonl")
    assert [s.op for s in recorded.steps] == ["insert", "match", "lock", "release_window", "unlock"]
    assert "already released: SGLang does nothing" in (tmp_path / "t.jsonl").read_text()
    assert run_scenario(recorded).passed
    assert run_against(recorded).agrees


@pytest.mark.parametrize("components, page", [(("full",), 4), (("full", "swa"), 2)])
def test_random_retract_restore_abort_agree_with_sglang(components, page):
    """The fuzzer's steps on a write-through host tier (backups: retract, restore and
    abort), refused admissions included (their match splits on both sides), agree with
    SGLang step by step."""
    import itertools

    from workbench.model.fuzzing.config import FuzzConfig
    from workbench.model.fuzzing.fuzz import LockstepRun, OpGenerator

    config = FuzzConfig(components, page, hicache="write_through")
    run = LockstepRun(config, checks=False)
    for raw in itertools.islice(OpGenerator(config, 1), 300):
        run.step(raw)
    steps = run.steps
    header = {"schema": 1, "scenario": {"name": "retraction-random"}, "config": config.scenario_config()}
    report = run_against(scenario_from_records(header, steps))
    assert report.agrees, report.divergence.as_dict()
    ran = [s["op"] for s in steps]
    assert {"retract", "restore", "abort"} <= set(ran) and report.states_compared == report.run


REQUEST_HEAVY = [(components, page) for components in (("full",), ("full", "swa"), ("full", "mamba"),
                                                        ("full", "swa", "mamba")) for page in (1, 4)]


@pytest.mark.parametrize("components, page", REQUEST_HEAVY, ids=["+".join(c) + f"-p{p}" for c, p in REQUEST_HEAVY])
def test_request_heavy_random_sequences_agree_with_sglang(components, page):
    """tools/differential_requests.py in small: the fuzzer's steps, request ops three
    times as likely, on every component set at pages 1 and 4, agree with SGLang step by
    step (a run may stop where ours says SGLang asserts)."""
    import importlib.util

    from workbench.model.fuzzing.config import FuzzConfig

    spec = importlib.util.spec_from_file_location("differential_requests", ROOT / "tools" / "differential_requests.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    config = FuzzConfig(components, page, mamba_size=12)
    header = {"schema": 1, "scenario": {"name": "requests"}, "config": config.scenario_config()}
    steps = tool.request_heavy_steps(config, 0, 120)
    report = run_against(scenario_from_records(header, steps))
    assert report.agrees, report.divergence.as_dict()
    assert report.run >= 40 and {"req_prefill", "req_decode", "checkpoint", "release"} <= {s["op"] for s in steps}


@pytest.mark.parametrize("components, page", REQUEST_HEAVY, ids=["+".join(c) + f"-p{p}" for c, p in REQUEST_HEAVY])
def test_session_heavy_random_sequences_agree_with_sglang(components, page):
    """``tools/differential_requests.py --sessions`` in small: with the session radix cache
    on, session ops (opens, closes, reaps, session requests, aborted finishes, streaming
    turns, whose borrowed records continue their last page above page 1) agree with
    SGLang's SessionController and session refs step by step, session_ref per node and
    component and the session tables included."""
    import importlib.util

    from workbench.model.fuzzing.config import FuzzConfig

    spec = importlib.util.spec_from_file_location("differential_requests", ROOT / "tools" / "differential_requests.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    config = FuzzConfig(components, page, mamba_size=12, sessions=True)
    header = {"schema": 1, "scenario": {"name": "sessions"}, "config": config.scenario_config()}
    wanted = {"session_open", "session_release", "release", "stream_turn"}

    def covers(steps: list[dict]) -> bool:
        drawn = {s["op"] for s in steps}
        return wanted <= drawn and any("session" in s for s in steps if s["op"] == "req_prefill")

    # the first seed whose sequence has every kind of session step (drawing is cheap, running is not)
    steps = next(steps for seed in range(20) if covers(steps := tool.request_heavy_steps(config, seed, 150)))
    report = run_against(scenario_from_records(header, steps))
    assert report.agrees, report.divergence.as_dict()
    assert report.run >= 60


def _option_runs():
    from workbench.model.fuzzing.options import OPTION_SETS

    return [(row, page) for row in OPTION_SETS for page in row.pages]


@pytest.mark.parametrize("row, page", _option_runs(), ids=[f"{r.label()}-p{p}" for r, p in _option_runs()])
def test_every_model_option_agrees_with_sglang_on_random_sequences(row, page):
    """``tools/differential_requests.py --sweep-options`` in small: each option set the
    fuzzer sweeps (an eviction policy, EAGLE keys, a Mamba or SWA option), on the
    components it needs, agrees with SGLang 0.5.23 step by step."""
    import importlib.util

    from workbench.model.fuzzing.config import FuzzConfig

    spec = importlib.util.spec_from_file_location("differential_requests", ROOT / "tools" / "differential_requests.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    config = FuzzConfig(row.needs, page, mamba_size=12).with_options(dict(row.options))
    header = {"schema": 1, "scenario": {"name": "options"}, "config": config.scenario_config()}
    steps = tool.request_heavy_steps(config, 0, 150)
    report = run_against(scenario_from_records(header, steps))
    assert report.agrees, report.divergence.as_dict()
    assert report.run >= 60


KV_EVENT_SCENARIOS = [n for n in SCENARIOS if "hicache" in n and "sidecar" not in n] + [
    "scenarios/tour.toml", "scenarios/tour_swa.toml", "scenarios/tour_mamba.toml", "scenarios/tour_sessions.toml"]


@pytest.mark.parametrize("name", KV_EVENT_SCENARIOS)
def test_kv_events_agree_with_sglang_event_by_event(name):
    """SGLang's recorder turned on after building (as ours): each step's batch, its
    types, block ids, parents, tokens, media and coalescing, equal."""
    report = run_against(load_scenario(ROOT / name), kv_events=True)
    assert report.agrees, (report.divergence.as_dict(), report.by_design)
    assert report.kv_event_steps == report.run and report.kv_events > 0


def test_a_kv_event_ours_loses_is_a_divergence():
    def drop_first_event(ours, index):
        if index == 1:
            ours.cache.tree.kv_events.take()

    report = run_against(load_scenario(ROOT / "scenarios/tour_hicache.toml"), perturb=drop_first_event,
                         kv_events=True)
    assert report.divergence.step == 1 and report.divergence.difference.field == "kv_events[0]"


def test_the_host_lru_order_is_compared():
    """Our side's SWA host LRU has its least recent copy moved to the most recent end
    (pools and nodes untouched): the orders differ, and the bridge says so."""
    moved = []

    def perturb(session, step_index):
        lru = session.cache.tree.host_lru["swa"]
        members = list(lru)
        if not moved and len(members) >= 2:
            lru.promote(members[-1])
            moved.append(step_index)

    scenario = load_scenario(ROOT / "scenarios/against/write-back-swa-evict-host-count.toml")
    assert run_against(scenario).agrees
    d = run_against(scenario, perturb=perturb).divergence
    assert moved and d is not None and d.difference.field == "lru.swa_host"
