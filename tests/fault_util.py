"""What the fault-catalogue tests share: a bug scenario with faults switched on, the
check that a fault module stays torch-free (``urc fuzz`` lists faults before torch
loads), the check that a bug scenario passes with no fault firing, and the run of a
bug scenario with its fault on."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from cache.faults import Fault, catalogue
from workbench.model.scenarios.scenario import Scenario, load_scenario
from workbench.model.timeline.runner import Runner
from workbench.model.timeline.timeline import Timeline

ROOT = Path(__file__).resolve().parents[1]
BUGS = ROOT / "scenarios" / "bugs"


def bug_scenario(name: str, faults=()) -> Scenario:
    """``scenarios/bugs/<name>.toml`` with exactly ``faults`` switched on."""
    scenario = load_scenario(BUGS / f"{name}.toml")
    return dataclasses.replace(scenario, config={**scenario.config, "faults": list(faults)})


def assert_imports_no_torch(module: str) -> None:
    code = f"import sys, {module}; from cache.faults import catalogue; catalogue(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def assert_passes_without_faults(scenario: Scenario) -> None:
    timeline = Runner(scenario).run()
    assert timeline.passed, [str(f) for r in timeline.records for f in (*r.failures, *r.violations)]
    assert not any(r.faults_fired for r in timeline.records)


@dataclasses.dataclass(frozen=True)
class BugCase:
    """A fault caught at the step it first fires: where that is, and what names it there
    (the request, session and storage fault tests each hold a table of these)."""

    fault: str
    source: str
    scenario: str
    fired_and_flagged: int
    violation: str  # "" when only an expectation names it
    field: str  # "" when only an invariant names it
    failed_step: int = 0  # the first failed expectation, where later than the step it fires (sessions)


def cited_fault(case) -> Fault:
    """The case's catalogue entry, after checking that it and the bug scenario both cite
    the case's source (the link every fault test table keeps)."""
    fault = catalogue()[case.fault]
    assert fault.source == case.source
    assert load_scenario(BUGS / f"{case.scenario}.toml").source == case.source
    return fault


def run_with_fault(scenario: str, fault: str) -> tuple[Timeline, list[int]]:
    """The bug scenario run with ``fault`` on, which must fail, and the steps where the
    fault fired."""
    timeline = Runner(bug_scenario(scenario, [fault])).run()
    assert not timeline.passed
    return timeline, [r.index for r in timeline.records if fault in r.faults_fired]


def assert_caught_where_it_fires(case: BugCase) -> None:
    """The fault fires once, at ``fired_and_flagged``, the first step flagged (by an
    invariant where the case names a later ``failed_step``, by any check otherwise); the
    case's violation is named there, and its field fails there or at ``failed_step``, the
    first step an expectation fails."""
    timeline, fired = run_with_fault(case.scenario, case.fault)
    records = timeline.records
    flagged = [r.index for r in records if (r.violations if case.failed_step else not r.passed)]
    assert fired == [case.fired_and_flagged] and flagged[0] == case.fired_and_flagged
    if case.violation:
        assert case.violation in {v.name for v in records[case.fired_and_flagged - 1].violations}
    if case.failed_step:
        assert [r.index for r in records if r.failures][0] == case.failed_step
    if case.field:
        assert case.field in {f.field for f in records[(case.failed_step or case.fired_and_flagged) - 1].failures}


def bug_case_tests(cases: list[BugCase]):
    """The two tests each fault family with a ``BugCase`` table runs on it: without the
    fault its bug scenario passes; with it the fault fires once and is caught at that
    step. A test module binds them to its own ``test_…`` names."""
    by_case = pytest.mark.parametrize("case", cases, ids=[c.fault for c in cases])

    @by_case
    def passes_without_the_fault(case: BugCase) -> None:
        assert_passes_without_faults(bug_scenario(case.scenario))

    @by_case
    def fires_and_is_caught_where_it_fires(case: BugCase) -> None:
        assert_caught_where_it_fires(case)

    return passes_without_the_fault, fires_and_is_caught_where_it_fires
