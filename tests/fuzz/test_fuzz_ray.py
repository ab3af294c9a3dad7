"""``urc fuzz --ray``: the same campaign as Ray tasks on a local Ray instance gives the
same findings as local jobs, shrunk on the cluster and written on the driver.

Ray is an optional extra: without it these tests skip, unless URC_REQUIRE_RAY is set
(``make ray-test``, which CI runs), when they fail instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.model.fuzzing.campaign import map_in_workers, plan, run_campaign, signature
from workbench.model.fuzzing.fuzz import FuzzConfig
from workbench.model.fuzzing.ray_pool import RayUnavailable

FAULT = "lock-skips-matched-node"  # flagged within a few dozen steps on Full p1
FAULTED = FuzzConfig(("full",), 1, faults=(FAULT,))


def need_ray():
    if os.environ.get("URC_REQUIRE_RAY"):
        import ray  # noqa: F401  (an ImportError here fails the test: CI's Ray run must not skip)
    else:
        pytest.importorskip("ray")


def test_without_ray_installed_the_campaign_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(RayUnavailable, match=r"pip install 'unified-cache-workbench\[ray\]'"):
        run_campaign(plan([FAULTED], [0], 50), 1, ray="local")


@pytest.fixture(scope="module")
def on_ray_and_locally():
    need_ray()
    tasks = plan([FAULTED, FuzzConfig(("full",), 4)], [0, 1], 400, episode_steps=200)
    local = run_campaign(tasks, 1, shrink_budget=20)
    remote = run_campaign(tasks, 1, shrink_budget=20, ray="local")
    return tasks, local, remote


def test_a_ray_campaign_finds_what_local_jobs_find(on_ray_and_locally):
    tasks, local, remote = on_ray_and_locally
    assert remote.jobs >= 1 and len(remote.results) == len(tasks)
    assert [(r.seed, r.episode, r.steps_run, r.finding) for r in remote.results] == [
        (r.seed, r.episode, r.steps_run, r.finding) for r in local.results]
    assert [signature(r) for r in remote.findings] == [signature(r) for r in local.findings]
    assert remote.findings and all(r.shrunk for r in remote.findings)  # shrunk on the cluster, sent back
    assert all(len(r.shrunk) <= len(r.run_steps) for r in remote.findings)


def test_map_in_workers_on_ray_keeps_the_order(on_ray_and_locally):
    assert map_in_workers(abs, [-3, 1, -2], 1, ray="local") == [3, 1, 2]


def test_cli_fuzz_ray_writes_the_reproduction_on_the_driver(tmp_path, on_ray_and_locally):
    done = subprocess.run([sys.executable, "-m", "workbench", "fuzz", "--ray", "--config", "full", "--fault", FAULT,
                           "--steps", "400", "--first", "--shrink-budget", "20", "-o", "repro.toml"],
                          cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 1, done.stderr
    assert (tmp_path / "repro.toml").exists()
    rerun = subprocess.run([sys.executable, "-m", "workbench", "run", "repro.toml"], cwd=tmp_path,
                           capture_output=True, text=True)
    assert rerun.returncode == 1 and "FAIL" in rerun.stdout
    refused = subprocess.run([sys.executable, "-m", "workbench", "fuzz", "--ray", "--jobs", "2"], cwd=tmp_path,
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "leave out --jobs" in refused.stderr
