"""The key faults of the catalogue (cache/faults/keys.py): turned on in the bug scenario
that shows the correct behaviour, each fires and is caught by a pool invariant where it
fires; without it the same steps pass; the fuzzer finds it under is_eagle.

Measured: eagle-tail-slot-leaked fires at step 3 (r1's release), flagged there by
pool.full.balance (a leak of 1), and step 3's full_available reads 58, not 59.
eagle-swa-frontier-on-tokens fires at step 2 (r1's checkpoint, page 4, window 5): the
frontier moves to 4, one SWA tombstone appears, and step 3's match finds 0 pairs, not 8.
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


FRONTIER = "eagle-swa-frontier-on-tokens"
FRONTIER_SCENARIO = "sglang-34870-eagle-swa-frontier-on-tokens"


def test_the_frontier_fault_cites_its_source_and_lives_under_is_eagle():
    fault = catalogue()[FRONTIER]
    assert fault.source == "sgl-project/sglang#34870" and fault.options == (("is_eagle", True),)
    assert fault.components == ("full", "swa")
    assert load_scenario(BUGS / f"{FRONTIER_SCENARIO}.toml").source == fault.source


def test_the_frontier_scenario_passes_without_the_fault():
    assert_passes_without_faults(bug_scenario(FRONTIER_SCENARIO))


def test_the_frontier_fault_leaves_a_short_leaf_the_next_match_refuses():
    timeline = Runner(bug_scenario(FRONTIER_SCENARIO, [FRONTIER])).run()
    assert [r.index for r in timeline.records if FRONTIER in r.faults_fired] == [2]  # the checkpoint
    assert [f.field for f in timeline.records[1].failures] == ["swa_tombstones"]
    assert timeline.records[2].result["prefix_len"] == 0 and not timeline.records[2].passed


def test_the_frontier_fault_needs_bigram_keys():
    scenario = bug_scenario(FRONTIER_SCENARIO, [FRONTIER])
    plain = dataclasses.replace(scenario, config={**scenario.config, "is_eagle": False}, steps=scenario.steps[:2])
    timeline = Runner(plain).run()
    assert not any(FRONTIER in r.faults_fired for r in timeline.records)


def test_the_fuzzer_finds_the_frontier_fault_under_is_eagle():
    config = next(c for c in configs_for(("full", "swa"), options=(("is_eagle", True),)) if c.page_size > 1)
    result = fuzz(dataclasses.replace(config, faults=(FRONTIER,)), seed=0, steps=900, episode_steps=300)
    assert result.finding is not None
