"""Scenarios written back (a saved live session, a shrunk repro, a test export) load
into the same steps, config and header they were written from; and steps appended to
a loaded scenario are checked as if they had been in the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.model.timeline.runner import Runner
from workbench.model.scenarios.scenario import ScenarioError, StepAppender, load_scenario, scenario_from_records
from workbench.model.scenarios.writer import scenario_jsonl, scenario_toml, toml_value

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = sorted((ROOT / "scenarios").rglob("*.toml"))


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.name)
@pytest.mark.parametrize("fmt", ["toml", "jsonl"])
def test_every_bundled_scenario_round_trips(tmp_path, path, fmt):
    scenario = load_scenario(path)
    out = tmp_path / f"again.{fmt}"
    out.write_text(scenario_toml(scenario) if fmt == "toml" else scenario_jsonl(scenario), encoding="utf-8")
    again = load_scenario(out)
    assert [s.raw for s in again.steps] == [s.raw for s in scenario.steps]
    assert (again.config, again.meta) == (scenario.config, scenario.meta)


def test_awkward_strings_and_keys_survive(tmp_path):
    meta = {"name": 'quote " backslash \\ tab \t newline \n unicode é ✝', "description": "[[step]] = not a table"}
    steps = [{"op": "match", "key": [1, 2], "as": "a b", "description": "x = 1\n# not a comment"},
             {"op": "lock", "match": "a b", "as": "L", "expect_error": "\\u0000"}]
    scenario = scenario_from_records({"schema": 1, "scenario": meta, "config": {"components": ["full"], "kv_size": 8}},
                                     steps)
    out = tmp_path / "s.toml"
    out.write_text(scenario_toml(scenario), encoding="utf-8")
    again = load_scenario(out)
    assert again.meta == meta and [s.raw for s in again.steps] == steps


def test_toml_values():
    assert toml_value(True) == "true" and toml_value([1, 2]) == "[1, 2]" and toml_value({}) == "{}"
    assert toml_value({"full_lock_ref": {"m-1": 1, "x y": 2}}) == '{ full_lock_ref = { m-1 = 1, "x y" = 2 } }'
    with pytest.raises(TypeError):
        toml_value(1.5)


def test_appended_steps_are_checked_like_the_file_and_a_refusal_changes_nothing():
    scenario = load_scenario(ROOT / "scenarios" / "tour_swa.toml")
    appender = StepAppender(scenario)
    assert appender.names["matches"] == ["head", "m"] and appender.names["locks"] == []  # tour_swa unlocks "l"
    with pytest.raises(ScenarioError, match="unknown match name 'nosuch'"):
        appender.append({"op": "lock", "match": "nosuch", "as": "L"})
    with pytest.raises(ScenarioError, match="match name 'm' is already taken"):
        appender.append({"op": "match", "key": [1], "as": "m"})
    with pytest.raises(ScenarioError, match="needs the swa component"):
        StepAppender(load_scenario(ROOT / "scenarios" / "tour.toml")).append({"op": "evict", "swa": 1})
    assert appender.scenario is scenario
    step = appender.append({"op": "lock", "match": "m", "as": "L2"})
    assert step.index == len(scenario.steps) + 1 and appender.count == len(scenario.steps) + 1
    grown = appender.scenario
    assert grown.steps[:-1] == scenario.steps and grown.steps[-1] is step
    assert appender.names["locks"] == ["L2"]
    with pytest.raises(ScenarioError, match="lock name 'L2' is still held"):
        appender.check({"op": "lock", "match": "m", "as": "L2"})


def test_a_runner_extended_with_appended_steps_runs_them_after_the_old_ones():
    scenario = load_scenario(ROOT / "scenarios" / "tour.toml")
    runner = Runner(scenario)
    runner.run()
    appender = StepAppender(scenario)
    appender.append({"op": "insert", "key": [7, 7, 7]})
    runner.extend(appender.scenario)
    assert not runner.done
    record = runner.step()
    assert record.index == len(scenario.steps) + 1 and record.passed and runner.done
    other = scenario_from_records(scenario.header(), [{"op": "check"}])
    with pytest.raises(ValueError, match="only be extended"):
        runner.extend(other)
