"""The request-flow faults of the catalogue (cache/faults/requests.py): each one, turned
on in the bug scenario that shows the correct behaviour, fires and is caught.

Measured (first step the fault fired / first failing step / what names it there):

  retract-pads-unaligned-prefix  fired 4 (retract after the checkpoint at 6 on page 4),
                                 flagged 4: pool.full.balance; expectation full_available
  abort-retracted-keeps-backup   fired 6 (abort of the retracted r1), flagged 6:
                                 host.pool_balance; expectation full_host_available
  stop-tail-freed-from-the-stop  fired 3 (release with the stop mid-page), flagged 3:
                                 the release refused as a double free, pool.full.balance
  abort-chunked-not-released     fired 4 (abort of r1 in chunked prefill), flagged 4:
                                 pool.full.balance; expectation full_protected
"""

from __future__ import annotations

import dataclasses

import pytest

from cache.faults import catalogue
from fault_util import BUGS, assert_imports_no_torch, assert_passes_without_faults, bug_scenario
from workbench.model.scenarios.scenario import load_scenario
from workbench.model.timeline.runner import Runner



@dataclasses.dataclass(frozen=True)
class Case:
    fault: str
    source: str
    scenario: str
    fired_and_flagged: int
    violation: str
    field: str


CASES = [
    Case("retract-pads-unaligned-prefix", "sgl-project/sglang#4977", "sglang-4977-retract-pads-unaligned-prefix", 4,
         "pool.full.balance", "full_available"),
    Case("abort-retracted-keeps-backup", "sgl-project/sglang#18701", "sglang-18701-abort-retracted-keeps-backup", 6,
         "host.pool_balance", "full_host_available"),
    Case("stop-tail-freed-from-the-stop", "sgl-project/sglang#38941", "sglang-38941-stop-tail-double-free", 3,
         "pool.full.balance", "error"),
    Case("abort-chunked-not-released", "sgl-project/sglang-jax#984", "sglang-jax-984-abort-chunked-leak", 4,
         "pool.full.balance", "full_protected"),
]
IDS = [c.fault for c in CASES]


def scenario_of(case: Case, faults=()):
    return bug_scenario(case.scenario, faults)


def test_catalogue_entries_cite_their_source_and_the_scenario_says_it_too():
    known = catalogue()
    for case in CASES:
        assert known[case.fault].source == case.source and known[case.fault].components == ("full",)
        assert load_scenario(BUGS / f"{case.scenario}.toml").source == case.source


def test_the_requests_faults_module_imports_no_torch():
    assert_imports_no_torch("cache.faults.requests")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_scenario_passes_without_the_fault(case):
    assert_passes_without_faults(scenario_of(case))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_fault_fires_and_is_caught_where_it_fires(case):
    timeline = Runner(scenario_of(case, [case.fault])).run()
    assert not timeline.passed
    fired = [r.index for r in timeline.records if case.fault in r.faults_fired]
    flagged = [r.index for r in timeline.records if not r.passed]
    assert fired == [case.fired_and_flagged] and flagged[0] == case.fired_and_flagged
    record = timeline.records[case.fired_and_flagged - 1]
    assert case.violation in {v.name for v in record.violations}
    assert case.field in {f.field for f in record.failures}
