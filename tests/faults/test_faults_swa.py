"""The SWA faults of the catalogue (cache/faults/swa.py): each one brings back one real
upstream bug, and its bug scenario, which passes on the correct code, catches it.

What each fault does on its scenario (first step it fired -> first step a check
flagged, and the check):

  swa-run-not-reset-at-tombstone (#17061): fired 11 -> flagged 11, invariant
      match.swa_window (the match's last window crosses tombstone D) and expect
      prefix_len (12, not 4).
  swa-unlock-after-split (#24153): fired 7 (the split of the stamped node) -> flagged 7,
      invariants swa.window_lock / lock.receipt_segment (the receipts' boundary is gone)
      and lock.unaccounted; both unlocks (steps 11, 12) are then refused with
      "swa segment release hit lock_ref=0", the upstream crash, on every retry.
  swa-recovery-stale-mapping (#27586): fired 2 (the tombstone's mapping left stale) ->
      flagged 2, invariant swa.orphan; fired again at 4 (the recovery frees through it),
      where pool.swa.free_and_used / pool.swa.balance and expect swa_available flag the
      released live slots.
  swa-last-leaf-all-tombstone (#29860): fired 2 -> flagged 2, expect nodes /
      swa_protected / swa_available (no invariant: a Full-only leaf is legal), then
      expect prefix_len 0 at the follow-up match (step 3).
  swa-unfinished-boundary-ignored (#30845/#36909): fired 3 -> flagged 3, invariants
      swa.unmapped / pool.swa.owned_twice / pool.swa.balance and expect swa_tombstones.
  swa-branch-tail-evicted-first (#35515): fired 4 (X's match refreshes its tail alone)
      -> flagged 10 only: nothing checks the SWA LRU order, so the scenario sees it when
      SWA eviction tombstones the stale [20 21] instead of deleting X's tail (expect
      full_evicted / swa_tombstones / nodes).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from urc_util import urc

from cache.faults import catalogue
from workbench.model.timeline.runner import Runner
from workbench.model.scenarios.scenario import load_scenario
from workbench.model.scenarios.writer import scenario_toml

ROOT = Path(__file__).resolve().parents[2]
BUGS = ROOT / "scenarios" / "bugs"

# name -> (scenario, first step fired, first step flagged, a check that flags it there)
CASES = {
    "swa-run-not-reset-at-tombstone": ("sglang-17061-match-run-reset-at-tombstone.toml", 11, 11, "match.swa_window"),
    "swa-unlock-after-split": ("sglang-24153-swa-unlock-after-split.toml", 7, 7, "swa.window_lock"),
    "swa-recovery-stale-mapping": ("sglang-27586-swa-recovery-stale-mapping.toml", 2, 2, "swa.orphan"),
    "swa-last-leaf-all-tombstone": ("sglang-29860-last-leaf-all-tombstone.toml", 2, 2, "expect:swa_protected"),
    "swa-unfinished-boundary-ignored": ("sglang-30845-unfinished-swa-boundary.toml", 3, 3, "swa.unmapped"),
    "swa-branch-tail-evicted-first": ("sglang-35515-tombstone-in-branch-window.toml", 4, 10, "expect:full_evicted"),
}
SOURCES = {
    "swa-run-not-reset-at-tombstone": "#17061",
    "swa-unlock-after-split": "#24153",
    "swa-recovery-stale-mapping": "#27586",
    "swa-last-leaf-all-tombstone": "#29860",
    "swa-unfinished-boundary-ignored": "#30845",
    "swa-branch-tail-evicted-first": "#35515",
}


def scenario_with(name: str, fault: bool = True):
    scenario = load_scenario(BUGS / CASES[name][0])
    if not fault:
        return scenario
    return dataclasses.replace(scenario, config={**scenario.config, "faults": [name]})


def checks_of(record) -> set[str]:
    return {v.name for v in record.violations} | {f"expect:{f.field}" for f in record.failures}


def test_catalogue_lists_the_swa_faults():
    known = catalogue()
    for name, source in SOURCES.items():
        fault = known[name]
        assert source in fault.source and fault.source.startswith("sgl-project/sglang#")
        assert fault.components == ("swa",)
        assert fault.summary and callable(fault.install)


def test_swa_fault_module_imports_nothing_heavy():
    """Checking a scenario's config must not import torch: only relative imports of the
    catalogue at the top of the module, everything else inside the installers."""
    tree = ast.parse((ROOT / "cache" / "faults" / "swa.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Import):
            pytest.fail(f"top-level import {[a.name for a in node.names]}")
        if isinstance(node, ast.ImportFrom):
            assert node.module == "__future__" or (node.level == 1 and node.module is None), ast.dump(node)


@pytest.mark.parametrize("name", CASES)
def test_scenario_passes_without_the_fault(name):
    timeline = Runner(scenario_with(name, fault=False)).run()
    assert timeline.passed
    assert not any(r.faults_fired for r in timeline.records)


@pytest.mark.parametrize("name", CASES)
def test_fault_fires_and_the_scenario_catches_it(name):
    _, first_fired, first_flagged, check = CASES[name]
    timeline = Runner(scenario_with(name)).run()
    assert not timeline.passed
    fired = [r.index for r in timeline.records if name in r.faults_fired]
    assert fired, "the fault never changed behaviour"
    assert all(set(r.faults_fired) <= {name} for r in timeline.records)
    failed = timeline.first_failure
    assert failed.index >= fired[0], "flagged before the fault did anything"
    assert (fired[0], failed.index) == (first_fired, first_flagged)
    assert check in checks_of(failed), checks_of(failed)


@pytest.mark.parametrize("name", CASES)
def test_urc_run_reports_the_fault_as_a_failure(name, tmp_path, capsys):
    path = tmp_path / f"{name}.toml"
    path.write_text(scenario_toml(scenario_with(name)), encoding="utf-8")
    rc, out, err = urc(capsys, "run", str(path))
    assert rc == 1, (out, err)
    assert "FAIL" in out
    plain = tmp_path / "plain.toml"
    plain.write_text(scenario_toml(scenario_with(name, fault=False)), encoding="utf-8")
    rc, out, err = urc(capsys, "run", str(plain))
    assert rc == 0, (out, err)


@pytest.mark.parametrize("name", CASES)
def test_fault_patches_only_its_own_cache(name):
    """Two caches alive at once, one faulted: the other runs the scenario correctly,
    and the fault lives on the instance (its component, pool or tree), not the class."""
    faulted = Runner(scenario_with(name))
    plain = Runner(scenario_with(name, fault=False))
    swa_f, swa_p = faulted.cache.by_name["swa"], plain.cache.by_name["swa"]
    patched = set(vars(swa_f)) - set(vars(swa_p))
    patched_tree = set(vars(faulted.cache.tree)) - set(vars(plain.cache.tree))
    assert patched or patched_tree
    for attr in patched:
        assert attr in dir(type(swa_p)), f"{attr} is not a method the fault replaces"
    while not faulted.done or not plain.done:  # interleaved, step by step
        if not faulted.done:
            faulted.step()
        if not plain.done:
            plain.step()
    assert not faulted.timeline.passed
    assert plain.timeline.passed
    assert not any(r.faults_fired for r in plain.timeline.records)
    assert plain.cache.fault_hits == {}
    assert faulted.cache.fault_hits[name] > 0
