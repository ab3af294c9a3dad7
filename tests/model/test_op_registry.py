"""The op registry: an op declared here, in the test, runs through a scenario file, a
live op, the fuzzer, the shrinker and (where SGLang 0.5.23 imports) the bridge, with
no other file touched; and the README's op reference is the registry's."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from cache import MatchPrefixParams, RadixKey
from urc_util import urc
from workbench.model import ops
from workbench.model.fuzzing.fuzz import FuzzConfig, OpGenerator, fuzz
from workbench.model.scenarios.live import OP_HELP, complete, parse_command
from workbench.model.scenarios.live_format import format_command
from workbench.model.timeline.runner import run_scenario
from workbench.model.scenarios.scenario import ScenarioError, StepAppender, load_scenario, scenario_from_records
from workbench.model.fuzzing.shrink import renumber

ROOT = Path(__file__).resolve().parents[2]
HEADER = {"schema": 1, "scenario": {"name": "probe"}, "config": {"components": ["full"], "kv_size": 32}}


def _run_probe(session, f: dict) -> dict:
    """A read-only lookup that reports how much of the key is cached, and names nothing."""
    result = session.cache.match_prefix(MatchPrefixParams(RadixKey(f["key"])))
    return {"probed": result.prefix_len, "missing": len(f["key"]) - result.prefix_len}


def _sglang_probe(side, f: dict) -> dict:
    result = side.cache.match_prefix(side.sg.MatchPrefixParams(key=side.key(f["key"], None)))
    return {"probed": int(result.device_prefix_len), "missing": len(f["key"]) - int(result.device_prefix_len)}


@pytest.fixture
def probe():
    spec = ops.declare(ops.OpSpec(
        "probe", "how much of a key is cached", _run_probe,
        fields=(ops.Field("key", ops.TOKENS, required=True), ops.Field("depth", ops.COUNT)),
        results=("probed", "missing"), run_sglang=_sglang_probe, read_only=True,
        fuzz=(ops.FuzzRule(99, lambda gen: 5, lambda gen: {"op": "probe", "key": gen.key()}),),
    ))
    yield spec
    ops.withdraw("probe")


def test_a_declared_op_runs_from_a_scenario_file(tmp_path, capsys, probe):
    path = tmp_path / "p.toml"
    path.write_text('schema = 1\n[scenario]\nname = "p"\n[config]\ncomponents = ["full"]\nkv_size = 32\n\n'
                    '[[step]]\nop = "insert"\nkey = [1, 2, 3]\n\n'
                    '[[step]]\nop = "probe"\nkey = [1, 2, 9]\nexpect = { probed = 2, missing = 1, nodes = 2 }\n')
    assert run_scenario(load_scenario(path)).passed
    rc, out, err = urc(capsys, "run", str(path))
    assert rc == 0, out + err
    path.write_text(path.read_text().replace("missing = 1", "missing = 1, nope = 2"))
    with pytest.raises(ScenarioError, match=r"p.toml:15: cannot expect 'nope' on op 'probe'"):
        load_scenario(path)
    path.write_text(path.read_text().replace("key = [1, 2, 9]", "key = [1, 2, 9]\ndepth = -1"))
    with pytest.raises(ScenarioError, match=r"p.toml:15: must be a non-negative int \(field 'depth'\)"):
        load_scenario(path)


def test_a_declared_op_is_a_live_command_with_help_and_completion(probe):
    assert OP_HELP["probe"] == "probe TOKENS… [depth=N]"
    raw = parse_command("probe 1..3 depth=2 expect probed=0")
    assert raw == {"op": "probe", "key": [1, 2, 3], "depth": 2, "expect": {"probed": 0}}
    assert parse_command(format_command(raw)) == raw
    assert "probe" in complete("pro", {}, ["full"])
    assert complete("probe 1 expect missi", {}, ["full"]) == ["missing="]
    appender = StepAppender(scenario_from_records(HEADER, []))
    assert appender.append(raw).op == "probe"
    with pytest.raises(ScenarioError, match="unknown field 'deep'"):
        appender.check(parse_command("probe 1 deep=2"))


def test_the_fuzzer_draws_a_declared_op_and_the_shrinker_reads_its_fields(probe):
    generator = OpGenerator(FuzzConfig(), seed=3)
    drawn = [generator.next_step() for _ in range(200)]
    assert any(step["op"] == "probe" for step in drawn)
    assert fuzz(FuzzConfig(), seed=3, steps=300).finding is None
    assert renumber([{"op": "probe", "key": [7, 7, 5]}]) == [{"op": "probe", "key": [1, 1, 2]}]


def test_withdrawn_ops_are_gone(probe):
    ops.withdraw("probe")
    with pytest.raises(ScenarioError, match="unknown op 'probe'"):
        scenario_from_records(HEADER, [{"op": "probe", "key": [1]}])
    ops.declare(probe)  # the fixture withdraws it again


def test_a_declared_op_agrees_with_sglang_through_the_bridge(probe):
    from workbench.bridge.sglang_env import SGLANG_VERSION, installed_version

    if installed_version() != SGLANG_VERSION:
        if os.environ.get("URC_REQUIRE_SGLANG"):  # make bridge-test: a skip would hide the check
            pytest.fail(f"needs SGLang {SGLANG_VERSION}")
        pytest.skip(f"needs SGLang {SGLANG_VERSION}")
    from workbench.bridge.differential import run_against

    steps = [{"op": "insert", "key": [1, 2, 3, 4]}, {"op": "probe", "key": [1, 2, 5]},
             {"op": "evict", "full": 4}, {"op": "probe", "key": [1, 2]}]
    report = run_against(scenario_from_records(HEADER, steps))
    assert report.agrees and report.run == 4


def test_the_docs_op_reference_is_the_registry():
    text = (ROOT / "docs" / "reference" / "ops.md").read_text(encoding="utf-8")
    assert ops.reference_table() in text, "regenerate it: make docs (python tools/gen_reference.py)"


def test_every_op_is_declared_with_what_every_tool_needs():
    for spec in ops.all_ops():
        assert spec.summary and spec.run is not None, spec.name
        assert spec.run_sglang is not None, f"{spec.name}: no SGLang executor"
        for field in spec.fields:
            assert field.kind in (ops.TOKENS, ops.NAME, ops.COUNT, ops.FLAG), (spec.name, field.name)
            assert (field.uses or field.defines or "") in ("", *ops.NAMESPACES), (spec.name, field.name)


def test_older_op_names_are_aliases_that_run_the_same_op():
    """``req_chunk`` and ``req_finish`` (the checkpoint / release_kv_cache
    era) still run, as ``checkpoint`` and ``release`` (SGLang 0.5.23's calls): the same
    op, the same fields, the same states; a step keeps the name it was written with."""
    from workbench.model.debugging.why import why_node
    from workbench.model.timeline.runner import same_state

    header = {"schema": 1, "scenario": {"name": "t"}, "config": {"components": ["full"], "kv_size": 64}}

    def flow(chunk: str, finish: str) -> list[dict]:
        return [{"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4]}, {"op": chunk, "req": "r1"},
                {"op": "req_decode", "req": "r1", "tokens": [5, 6]}, {"op": finish, "req": "r1"},
                {"op": "req_prefill", "req": "r2", "tokens": [1, 2, 9]}, {"op": finish, "req": "r2", "insert": False}]

    old = run_scenario(scenario_from_records(header, flow("req_chunk", "req_finish")))
    new = run_scenario(scenario_from_records(header, flow("checkpoint", "release")))
    assert old.passed and new.passed and len(old) == len(new) == 6
    assert all(same_state(old.state_after(i).to_snapshot(), new.state_after(i).to_snapshot()) for i in range(7))
    assert [r.step.op for r in old.records][1::2] == ["req_chunk", "req_finish", "req_finish"]
    assert ops.get("req_finish") is ops.get("release") and ops.canonical("req_chunk") == "checkpoint"
    assert "(req_finish r1" in why_node(old, 4, 1).text() and "(release r1" in why_node(new, 4, 1).text()
    assert parse_command("req_finish r1 noinsert") == {"op": "req_finish", "req": "r1", "insert": False}
    with pytest.raises(ValueError, match="'req_chunk' is already declared"):
        ops.declare(ops.OpSpec("clash", "an op taking an older name", lambda session, f: None,
                               aliases=("req_chunk",)))
    assert ops.get("clash") is None
