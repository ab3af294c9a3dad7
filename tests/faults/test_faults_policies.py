"""The eviction-policy faults of the catalogue (cache/faults/policies.py): each one, on in
the bug scenario that shows the correct behaviour, fires and makes a later expectation
fail; without it the same steps pass. A wrong victim breaks no tree invariant: the
eviction audit (tree_core.audit_full_victim, on while a checker watches a non-lru policy)
names a victim taken out of the policy's order; a policy that reads wrong counts still
takes its own first leaf, so only an expectation names that one.

Measured (first step the fault fired / the violation there / the first failed expectation):

  hit-count-never-counted         1 (the first insert's hit is undone); none; step 8 prefix_len
                                  (A, the most used, was evicted)
  policy-heap-kept-across-walks   6 (the second eviction takes B); evict.policy_order; step 7 prefix_len
"""

from __future__ import annotations

import dataclasses

import pytest

from fault_util import (
    BUGS, assert_imports_no_torch, assert_passes_without_faults, bug_scenario, cited_fault, run_with_fault,
)
from workbench.model.scenarios.scenario import load_scenario
from workbench.model.timeline.runner import Runner


@dataclasses.dataclass(frozen=True)
class Case:
    fault: str
    source: str
    scenario: str
    policy: str
    first_fired: int
    violation: str  # at the step it first fires ("" : none)
    failed_step: int


CASES = [
    Case("hit-count-never-counted", "sgl-project/sglang#18843", "sglang-18843-hit-count-never-counted", "lfu", 1, "", 8),
    Case("policy-heap-kept-across-walks", "sgl-project/sglang-omni#1724",
         "sglang-omni-1724-policy-heap-kept-across-walks", "mru", 6, "evict.policy_order", 7),
]
IDS = [c.fault for c in CASES]


def test_catalogue_entries_cite_their_source_and_name_their_policy():
    for case in CASES:
        fault = cited_fault(case)
        assert fault.components == ("full",) and fault.options == (("eviction_policy", case.policy),)
        assert load_scenario(BUGS / f"{case.scenario}.toml").config["eviction_policy"] == case.policy


def test_the_policies_faults_module_imports_no_torch():
    assert_imports_no_torch("cache.faults.policies")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_scenario_passes_without_the_fault(case):
    assert_passes_without_faults(bug_scenario(case.scenario))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_fault_fires_and_a_later_expectation_fails(case):
    timeline, fired = run_with_fault(case.scenario, case.fault)
    assert fired[0] == case.first_fired
    flagged = {v.name for r in timeline.records for v in r.violations}
    assert flagged == ({case.violation} if case.violation else set())
    if case.violation:
        assert case.violation in {v.name for v in timeline.records[case.first_fired - 1].violations}
    failed = [r.index for r in timeline.records if r.failures]
    assert failed[0] == case.failed_step
    assert "prefix_len" in {f.field for f in timeline.records[case.failed_step - 1].failures}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_under_lru_the_fault_changes_no_victim(case):
    """Both faults live under their policy: the same steps under lru evict as without them."""
    scenario = bug_scenario(case.scenario, [case.fault])
    lru = dataclasses.replace(scenario, config={**scenario.config, "eviction_policy": "lru"})
    plain = dataclasses.replace(lru, config={**lru.config, "faults": []})
    with_fault, without = Runner(lru).run(), Runner(plain).run()
    assert [n.path for n in with_fault.final.non_root()] == [n.path for n in without.final.non_root()]
