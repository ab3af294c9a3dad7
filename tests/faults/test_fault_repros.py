"""The fault catalogue against the fuzzer, from the committed detection run
(``urc fuzz --faults all -o scenarios/fuzz``): every fault is flagged by the fuzzer
from its recorded config and seed (deterministic, so CI re-finds it within that
budget), and its shrunk scenario fails ``urc run`` the same way with the fault on and
passes with ``faults = []``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from cache.faults import catalogue
from workbench.model.fuzzing.fuzz import DETECT_EPISODE, configs_for, first_finding, fuzz
from workbench.model.timeline.runner import Runner
from workbench.model.scenarios.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "scenarios" / "fuzz"
ROWS = {row["fault"]: row for row in json.loads((FOLDER / "detections.json").read_text())}
CONFIGS = {c.label(): c for f in catalogue().values() for c in configs_for(f.components, f.sessions, f.options, f.storage)}
FAULTS = list(catalogue())


def test_the_catalogue_has_fifteen_faults_or_more_over_every_component():
    faults = catalogue().values()
    assert len(faults) >= 15 and set(ROWS) == {f.name for f in faults}
    for component in ("swa", "mamba"):
        assert any(component in f.components for f in faults)
    assert any(set(f.components) <= {"full"} for f in faults)  # Full-only faults
    assert all(f.source and f.summary for f in faults)


@pytest.mark.parametrize("fault", FAULTS)
def test_the_fuzzer_finds_each_fault_from_its_recorded_seed(fault):
    row = ROWS[fault]
    assert row["flagged"], f"{fault} was not flagged in the detection run"
    config = dataclasses.replace(CONFIGS[row["config"]], faults=(fault,))
    result = fuzz(config, row["seed"], (row["episode"] + 1) * DETECT_EPISODE, episode_steps=DETECT_EPISODE)
    assert result.finding is not None and result.episode == row["episode"]
    assert (result.finding.step, result.finding.check) == (row["flagged_step"], row["check"])
    assert result.first_fired == row["first_faulty_step"]


@pytest.mark.parametrize("fault", FAULTS)
def test_each_shrunk_repro_fails_the_same_way_and_passes_without_its_fault(fault):
    row = ROWS[fault]
    scenario = load_scenario(FOLDER / f"{fault}.toml")
    assert scenario.config["faults"] == [fault] and len(scenario.steps) == row["shrunk_steps"]
    first = first_finding(scenario)
    assert first is not None and first.check == row["check"]
    clean = dataclasses.replace(scenario, config={**scenario.config, "faults": []})
    assert Runner(clean).run().passed

