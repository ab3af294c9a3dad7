"""The key faults of the catalogue (cache/faults/keys.py): turned on in the bug scenario
that shows the correct behaviour, each fires and is caught by a pool invariant where it
fires; without it the same steps pass; the fuzzer finds it under is_eagle.

Measured: eagle-tail-slot-leaked fires at step 3 (r1's release), flagged there by
pool.full.balance (a leak of 1), and step 3's full_available reads 58, not 59.
"""

from __future__ import annotations

import dataclasses

from cache.faults import catalogue
from fault_util import BUGS, assert_imports_no_torch, assert_passes_without_faults, bug_scenario
from workbench.model.fuzzing.fuzz import configs_for, fuzz
from workbench.model.scenarios.scenario import load_scenario
from workbench.model.timeline.runner import Runner

FAULT = "eagle-tail-slot-leaked"
SCENARIO = "sglang-10846-eagle-tail-slot-leaked"


def test_the_fault_cites_its_source_and_lives_under_is_eagle():
    fault = catalogue()[FAULT]
    assert fault.source == "sgl-project/sglang#10846" and fault.options == (("is_eagle", True),)
    assert load_scenario(BUGS / f"{SCENARIO}.toml").source == fault.source


def test_the_keys_faults_module_imports_no_torch():
    assert_imports_no_torch("cache.faults.keys")


def test_scenario_passes_without_the_fault():
    assert_passes_without_faults(bug_scenario(SCENARIO))


def test_fault_fires_and_is_caught_where_it_fires():
    timeline = Runner(bug_scenario(SCENARIO, [FAULT])).run()
    assert not timeline.passed
    assert [r.index for r in timeline.records if FAULT in r.faults_fired] == [3]
    assert [r.index for r in timeline.records if r.violations][0] == 3
    assert "pool.full.balance" in {v.name for v in timeline.records[2].violations}
    assert "full_available" in {f.field for f in timeline.records[2].failures}


def test_without_eagle_keys_the_fault_changes_nothing():
    scenario = bug_scenario(SCENARIO, [FAULT])
    plain = dataclasses.replace(scenario, config={**scenario.config, "is_eagle": False}, steps=scenario.steps[:2])
    timeline = Runner(plain).run()
    assert not any(FAULT in r.faults_fired for r in timeline.records)


def test_the_fuzzer_finds_it_under_is_eagle():
    config = dataclasses.replace(configs_for(("full",), options=(("is_eagle", True),))[0], faults=(FAULT,))
    result = fuzz(config, seed=0, steps=600, episode_steps=300)
    assert result.finding is not None
