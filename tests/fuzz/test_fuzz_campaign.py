"""Fuzz campaigns across processes (``urc fuzz --jobs N --seeds K``): the findings do not
depend on the number of jobs, the first one is what a single process stops at, failures
are merged by signature and each shrunk once, progress adds up, and further findings
never overwrite a file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from urc_util import urc
from workbench.model.fuzzing.campaign import EpisodeCrash, merge, plan, run_campaign, signature
from workbench.model.fuzzing.fuzz import FuzzConfig, Finding, FuzzResult, fuzz

FAULT = "lock-skips-matched-node"  # flagged within a few dozen steps on Full p1
FAULTED = FuzzConfig(("full",), 1, faults=(FAULT,))


def outcome(result: FuzzResult) -> tuple:
    return result.seed, result.episode, result.steps_run, result.finding, result.first_fired, result.raw_steps


@pytest.fixture(scope="module")
def one_and_two_jobs():
    tasks = plan([FAULTED, FuzzConfig(("full",), 4)], [0, 1], 600, episode_steps=200)
    return tasks, run_campaign(tasks, 1, shrink=False), run_campaign(tasks, 2, shrink=False)


def test_the_plan_cuts_each_config_and_seed_into_episodes():
    tasks = plan([FAULTED], [3, 4], 500, episode_steps=200)
    assert [(t.seed, t.episode, t.steps) for t in tasks] == [(3, 0, 200), (3, 1, 200), (3, 2, 100),
                                                              (4, 0, 200), (4, 1, 200), (4, 2, 100)]


def test_the_findings_do_not_depend_on_the_number_of_jobs(one_and_two_jobs):
    tasks, one, two = one_and_two_jobs
    assert (one.jobs, two.jobs) == (1, 2) and len(one.results) == len(two.results) == len(tasks)
    assert [outcome(r) for r in one.results] == [outcome(r) for r in two.results]
    assert [signature(r) for r in one.findings] == [signature(r) for r in two.findings]
    assert one.findings and all(r.config.faults == (FAULT,) for r in one.findings)  # the unfaulted config passes
    assert one.steps_run == two.steps_run < sum(t.steps for t in tasks)  # faulted episodes stop at their finding


def test_the_first_finding_is_where_a_single_process_stops(one_and_two_jobs):
    _, one, _ = one_and_two_jobs
    first = one.findings[0]
    alone = fuzz(FAULTED, first.seed, 600, episode_steps=200)
    assert (alone.episode, alone.finding) == (first.episode, first.finding)


def test_findings_merge_by_signature_keeping_the_first():
    def result(seed: int, name: str, components=("full",)) -> FuzzResult:
        config = dataclasses.replace(FAULTED, components=components)
        return FuzzResult(config, seed, 10, 1.0, finding=Finding("invariant", name, 5, "x"))

    results = [result(0, "leaf_set"), FuzzResult(FAULTED, 1, 10, 1.0), result(2, "leaf_set"),
               result(3, "lock.unaccounted"), result(4, "leaf_set", ("full", "swa"))]
    assert [(r.seed, r.finding.name) for r in merge(results)] == [(0, "leaf_set"), (3, "lock.unaccounted"),
                                                                  (4, "leaf_set")]


def test_workers_report_every_step_they_run():
    seen = []
    campaign = run_campaign(plan([FuzzConfig(("full",), 1)], [0], 400, episode_steps=200), 2, on_steps=seen.append)
    assert sum(seen) == campaign.steps_run == 400 and not campaign.findings


def test_no_episode_starts_past_the_time_budget():
    campaign = run_campaign(plan([FuzzConfig(("full",), 1)], [0], 400, episode_steps=200), 1, time_budget=1e-9)
    assert campaign.steps_run == 0 and len(campaign.results) == 2


def crashing_episode(config, seed, episode, steps, *rest, **kw) -> FuzzResult:
    """An episode whose cache raises on seed 1 (as a bug of ours would)."""
    if seed == 1:
        raise ZeroDivisionError("a bug")
    return FuzzResult(config, seed, steps, 0.0, episode)


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_episode_that_raises_names_its_config_seed_and_episode(jobs):
    tasks = plan([FuzzConfig(("full",), 1)], [0, 1], 10, episode_steps=10)
    with pytest.raises(EpisodeCrash, match=r"^Full p1, seed 1, episode 0: ZeroDivisionError: a bug$"):
        run_campaign(tasks, jobs, episode=crashing_episode)


def test_each_distinct_failure_is_shrunk_once_and_written_without_overwriting(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("fuzz-lock-skips-matched-node-seed1.toml").write_text("mine\n")  # a user's file where seed 1's would go
    rc, out, err = urc(capsys, "fuzz", "--config", "full", "--fault", FAULT, "--seeds", "2", "--steps", "200",
                       "--jobs", "2", "--shrink-budget", "20")
    assert rc == 1, err
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert len(fails) == 2 and "2 distinct failures" in out and "2 jobs" in out
    assert Path("fuzz-lock-skips-matched-node-seed1.toml").read_text() == "mine\n"
    written = sorted(p.name for p in tmp_path.glob("*.toml"))
    assert written == ["fuzz-lock-skips-matched-node-seed0.toml", "fuzz-lock-skips-matched-node-seed1-2.toml",
                       "fuzz-lock-skips-matched-node-seed1.toml"]
    for name in written[:2]:
        assert urc(capsys, "run", name)[0] == 1  # each repro fails `urc run` …


@pytest.mark.parametrize("flag", ["--jobs", "--seeds"])
def test_a_count_below_one_is_bad_input(capsys, flag):
    rc, _, err = urc(capsys, "fuzz", flag, "0")
    assert rc == 2 and f"{flag} must be a positive int (got 0)" in err


# ---- configs swept when none is given ------------------------------------------------------------


def test_the_sweep_covers_every_scale_config_and_its_tight_and_roomy_pools():
    from workbench.cli.fuzz import _check_config
    from workbench.model.fuzzing.sweep import SCALE_CONFIGS
    from workbench.model.fuzzing.sweep import sweep_configs

    swept = sweep_configs()
    labels = [c.label() for c in swept]
    assert swept[: len(SCALE_CONFIGS)] == list(SCALE_CONFIGS) and len(set(labels)) == len(labels)
    twins = swept[len(SCALE_CONFIGS):]
    assert len(twins) == 2 * sum(1 for c in SCALE_CONFIGS if not c.hicache)
    assert {c.page_size for c in twins} == {1, 4, 16} and any(c.kv_size >= 256 * c.page_size for c in twins)
    for config in swept:
        _check_config(config)  # every one admits the fuzzer's prompts


def test_a_fault_is_swept_over_the_configs_its_detection_searches():
    from workbench.model.fuzzing.sweep import sweep_configs

    swept = sweep_configs(("mamba-evict-locked-leaf",))
    assert swept and all(c.faults == ("mamba-evict-locked-leaf",) and "mamba" in c.components for c in swept)
    assert any(c.components == ("full", "swa", "mamba") for c in swept)  # where the detection table found it


def test_with_no_config_given_urc_fuzz_finds_a_fault_on_the_config_that_exposes_it(capsys, tmp_path, monkeypatch):
    """swa-run-not-reset-at-tombstone needs SWA: `urc fuzz --fault F` alone sweeps the SWA configs."""
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "fuzz", "--fault", "swa-run-not-reset-at-tombstone", "--seed", "1", "--steps", "1200",
                       "--shrink-budget", "3")
    assert rc == 1, err
    assert out.startswith("FAIL Full+SWA p1 w4, seed 1: fingerprint match.swa_window") and "configs swept" in out


def test_with_no_config_given_an_unfaulted_run_sweeps_every_config(capsys):
    import json

    from workbench.model.fuzzing.sweep import sweep_configs

    rc, out, err = urc(capsys, "fuzz", "--steps", "40", "--json")
    report = json.loads(out)
    assert rc == 0, err
    assert report["configs"] == [c.label() for c in sweep_configs()] and report["steps"] == 40 * len(report["configs"])
    rows = report["per_config"]  # each config's own figure, in plan order
    assert [row["config"] for row in rows] == report["configs"]
    assert all(row["steps"] == 40 and row["episodes"] == 1 and row["failed_episodes"] == 0 for row in rows)


def test_first_stops_at_the_first_failure_the_same_way_on_any_number_of_jobs():
    tasks = plan([FuzzConfig(("full",), 4), FAULTED, FuzzConfig(("full",), 1)], [0, 1], 400, episode_steps=200)
    one = run_campaign(tasks, 1, shrink=False, first=True)
    two = run_campaign(tasks, 2, shrink=False, first=True)
    assert [outcome(r) for r in one.results] == [outcome(r) for r in two.results]
    assert len(one.findings) == len(two.findings) == 1 and signature(one.findings[0]) == signature(two.findings[0])
    failing = next(k for k, r in enumerate(one.results) if r.finding is not None)
    assert failing == len(one.results) - 1 < len(tasks) - 1  # nothing after the first failure is kept
    assert one.results[failing].config.faults == (FAULT,) and one.steps_run == two.steps_run
