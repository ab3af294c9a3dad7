"""What the fault-catalogue tests share: a bug scenario with faults switched on, the
check that a fault module stays torch-free (``urc fuzz`` lists faults before torch
loads), and the check that a bug scenario passes with no fault firing."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from workbench.model.scenarios.scenario import Scenario, load_scenario
from workbench.model.timeline.runner import Runner

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
