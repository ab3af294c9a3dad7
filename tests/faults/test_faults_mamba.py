"""The Mamba faults (cache/faults/mamba.py): each re-introduces one upstream bug into one
cache instance, its bug scenario catches it, and a cache without it is untouched.

Detection table (bug scenario run with the fault on; steps are 1-based):

  fault                                first fired  first flagged  caught by
  mamba-lru-not-refreshed              4 (match)    9 (match)      expectation prefix_len (0 expected, 8: Y was
                                                                   evicted in X's place at step 8, same counts)
  mamba-cow-leak-on-failed-admission   2            2              violation pool.mamba.balance; failure "state"
                                                                   (the refused admission changed the cache)
  mamba-evict-locked-leaf              9 (evict)    9              violations counter.evictable, lock.unaccounted,
                                                                   lock.receipt_dangling; expectation full_evicted
  mamba-unlock-after-revive            6 (lock)     6              violation lock.unaccounted; expectation
                                                                   mamba_lock_ref
  mamba-alloc-asserts-when-all-locked  4 (chunk)    4              expectation expect_error (the assert, not the
                                                                   clean "cannot alloc mamba" refusal)
  mamba-load-back-slot-kept            6 (prefill)  6              violation mamba.request_state (the prefill ran
                                                                   from the kept slot's stale state)

The LRU fault is the only one flagged later than it fires: no invariant checks the
Mamba LRU's order (only its membership), so the scenario sees it when an eviction
takes the wrong state and a later match proves it.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from cache.faults import catalogue
from urc_util import urc
from workbench.model.timeline.runner import Runner
from workbench.model.scenarios.scenario import load_scenario
from workbench.model.scenarios.writer import scenario_toml

ROOT = Path(__file__).resolve().parents[2]
BUGS = ROOT / "scenarios" / "bugs"

# fault -> (bug scenario, first fired step, first flagged step, a violation or failure field that flags it)
CASES = {
    "mamba-lru-not-refreshed": ("sglang-12007-mamba-lru-order", 4, 9, "prefix_len"),
    "mamba-cow-leak-on-failed-admission": ("sglang-16067-cow-slot-leak-on-failed-admission", 2, 2, "pool.mamba.balance"),
    "mamba-evict-locked-leaf": ("sglang-21379-mamba-evict-full-locked-leaf", 9, 9, "counter.evictable"),
    "mamba-unlock-after-revive": ("sglang-27147-mamba-lock-tombstone-revive", 6, 6, "lock.unaccounted"),
    "mamba-alloc-asserts-when-all-locked": ("sglang-36770-cannot-alloc-mamba-all-locked", 4, 4, "expect_error"),
    "mamba-load-back-slot-kept": ("sglang-30986-load-back-call-off-keeps-mamba-slot", 6, 6, "mamba.request_state"),
}
SOURCES = {
    "mamba-lru-not-refreshed": "sgl-project/sglang#12007",
    "mamba-cow-leak-on-failed-admission": "sgl-project/sglang#16067",
    "mamba-evict-locked-leaf": "sgl-project/sglang#21379",
    "mamba-unlock-after-revive": "sgl-project/sglang#27147",
    "mamba-alloc-asserts-when-all-locked": "sgl-project/sglang#36770",
    "mamba-load-back-slot-kept": "sgl-project/sglang#30986",
}


def _scenario(stem: str):
    return load_scenario(BUGS / f"{stem}.toml")


def _with_fault(scenario, name: str):
    return dataclasses.replace(scenario, config={**scenario.config, "faults": [name]})


def _first_fired(timeline, name: str):
    return next((r.index for r in timeline.records if name in r.faults_fired), None)


def _checks(record) -> set[str]:
    return {v.name for v in record.violations} | {f.field for f in record.failures}


def test_catalogue_lists_the_mamba_faults():
    known = catalogue()
    for name, source in SOURCES.items():
        fault = known[name]
        assert fault.source == source
        assert fault.components == ("mamba",)
        assert fault.summary


def test_catalogue_imports_no_torch():
    code = "import sys, cache.faults as f; f.catalogue(); assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.parametrize("name", list(CASES))
def test_bug_scenario_passes_without_the_fault(name):
    timeline = Runner(_scenario(CASES[name][0])).run()
    assert timeline.passed
    assert not any(r.faults_fired for r in timeline.records)


@pytest.mark.parametrize("name", list(CASES))
def test_bug_scenario_catches_the_fault(name):
    stem, fired_at, flagged_at, check = CASES[name]
    runner = Runner(_with_fault(_scenario(stem), name))
    timeline = runner.run()
    assert not timeline.passed
    first_fired = _first_fired(timeline, name)
    failed = timeline.first_failure
    assert first_fired == fired_at
    assert failed.index == flagged_at >= first_fired
    assert check in _checks(failed), _checks(failed)
    assert runner.cache.fault_hits[name] >= 1
    # a faulty copy fires only on steps that ran it: none before the first one differs
    assert all(r.passed for r in timeline.records[: first_fired - 1])


@pytest.mark.parametrize("name", list(CASES))
def test_urc_run_fails_with_the_fault(name, capsys, tmp_path):
    path = tmp_path / f"{name}.toml"
    path.write_text(scenario_toml(_with_fault(_scenario(CASES[name][0]), name)), encoding="utf-8")
    rc, out, err = urc(capsys, "run", str(path))
    assert rc == 1, (out, err)
    assert "FAIL" in out


@pytest.mark.parametrize("name", list(CASES))
def test_a_fault_touches_only_its_own_cache(name):
    from cache.components.mamba.component import MambaComponent

    before = {k: v for k, v in vars(MambaComponent).items() if callable(v)}
    scenario = _scenario(CASES[name][0])
    faulty = Runner(_with_fault(scenario, name))
    clean = Runner(scenario)  # built while the faulty one exists
    faulty.run()
    assert not faulty.timeline.passed
    timeline = clean.run()
    assert timeline.passed and clean.cache.fault_hits == {}
    assert not any(r.faults_fired for r in timeline.records)
    assert {k: v for k, v in vars(MambaComponent).items() if callable(v)} == before
    mamba = clean.cache.by_name["mamba"]
    hooks = [h for h in clean.cache.tree._match_end_hooks if getattr(h, "__self__", None) is mamba]
    assert [h.__func__ for h in hooks] == [MambaComponent.on_match_end]  # the tree's own hook list
    assert not any(attr in vars(mamba) for attr in ("on_match_end", "commit_insert", "evict_next", "acquire_lock",
                                                    "check_release", "release_lock", "alloc_slot",
                                                    "finalize_load_back"))
    assert "new_request" not in vars(clean.cache)
    assert Runner(scenario).run().passed  # and one built after it ran


MAMBA_SCENARIOS = sorted(p for p in (ROOT / "scenarios").rglob("*.toml")
                         if '"mamba"' in p.read_text(encoding="utf-8") and p.parent.name != "fuzz")  # fuzz/: faulted


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("path", MAMBA_SCENARIOS, ids=lambda p: p.stem)
def test_a_fault_that_has_not_fired_changes_nothing(name, path):
    """Up to the step a fault first fires, the run equals the run without it: same
    state after each step, same results and errors. A fault that never fires leaves
    the whole run as it was."""
    scenario = load_scenario(path)
    clean = Runner(scenario).run()
    faulty = Runner(_with_fault(scenario, name)).run()
    first = _first_fired(faulty, name)
    upto = len(clean) if first is None else first - 1
    for k in range(upto):
        a, b = clean.records[k], faulty.records[k]
        assert (a.result, a.error, a.passed) == (b.result, b.error, b.passed), f"step {k + 1}"
        sa, sb = clean.state_after(k + 1), faulty.state_after(k + 1)
        assert dict(sa.records) == dict(sb.records) and sa.globals == sb.globals, f"step {k + 1}"
    if first is None:
        assert faulty.passed == clean.passed


def test_a_host_tier_fault_is_searched_only_where_there_is_a_host_tier():
    """A called-off load-back needs a host tier: sweeping the Mamba configs without one
    only spends the search (``urc fuzz --fault F`` with no config)."""
    from workbench.model.fuzzing.sweep import configs_for, sweep_configs

    swept = sweep_configs(("mamba-load-back-slot-kept",))
    assert swept and all(c.hicache for c in swept)
    assert any(not c.hicache for c in configs_for(("mamba",)))  # what it searched without the declaration
    assert {c.hicache for c in sweep_configs(("mamba-lru-not-refreshed",))} >= {None, "write_back"}
