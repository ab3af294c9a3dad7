"""Every file under scenarios/ is a regression test: it must load and pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.model.timeline.runner import run_scenario

ROOT = Path(__file__).resolve().parents[2] / "scenarios"
# scenarios/fuzz/ holds the fuzzer's fault repros, which fail on purpose (tests/faults/test_fault_repros.py)
FILES = sorted(p for p in ROOT.rglob("*") if p.suffix in (".toml", ".jsonl") and p.parent.name != "fuzz")


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_scenario_passes(path: Path):
    timeline = run_scenario(path)
    failed = timeline.first_failure
    assert failed is None, (
        f"step {failed.step.index} ({path.name}:{failed.step.line}) {failed.step.op}: "
        + "; ".join([str(f) for f in failed.failures] + [str(v) for v in failed.violations])
    )
    assert len(timeline) == len(timeline.scenario.steps) > 0


def test_bug_reproductions_name_their_source():
    bugs = [p for p in FILES if "bugs" in p.parts]
    for path in bugs:
        timeline = run_scenario(path)
        source = timeline.scenario.source
        assert "#" in source and "/" in source, f"{path.name}: source must name the upstream issue/PR"
        assert len(timeline.scenario.description) > 80, f"{path.name}: say what went wrong upstream"


def test_the_tour_exists_and_describes_every_step():
    timeline = run_scenario(ROOT / "tour.toml")
    assert all(r.step.description for r in timeline.records)
