"""``urc fuzz --against sglang``: generated episodes on SGLang 0.5.23 too, in lockstep.
Runs in ``make bridge-test`` (SGLang importable); skips elsewhere, as the bridge tests do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_util import requires_sglang

pytestmark = requires_sglang()

from cache import EvictParams  # noqa: E402
from workbench.bridge import differential_fuzz  # noqa: E402
from workbench.bridge.differential import run_against  # noqa: E402
from workbench.bridge.differential_fuzz import differential_episode, divergence_scenario, shrink_divergence  # noqa: E402
from workbench.model.fuzzing.campaign import plan, run_campaign  # noqa: E402
from workbench.model.fuzzing.config import FuzzConfig  # noqa: E402
from workbench.model.scenarios.scenario import load_scenario  # noqa: E402
from workbench.model.scenarios.writer import scenario_toml  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [FuzzConfig(("full",), 1), FuzzConfig(("full", "swa"), 2, 4), FuzzConfig(("full", "mamba"), 1),
           FuzzConfig(("full", "swa", "mamba"), 1, 4)]


# sessions on a host tier: the host LRUs partitioned by session refs, a session's host copies kept
SESSIONS_ON_THE_HOST = [FuzzConfig(("full", "swa"), 1, 4, hicache="write_through", sessions=True),
                        FuzzConfig(("full", "mamba"), 4, hicache="write_back", sessions=True),
                        FuzzConfig(("full", "swa", "mamba"), 1, 4, hicache="write_through_selective", sessions=True)]


@pytest.mark.parametrize("config", CONFIGS + SESSIONS_ON_THE_HOST, ids=lambda c: c.label())
def test_generated_episodes_agree_with_sglang(config):
    result = differential_episode(config, seed=0, episode=0, steps=300)
    assert result.steps_run == 300 and result.finding is None, result.finding


def test_the_sweep_against_sglang_agrees_in_short():
    """``urc fuzz --against sglang``'s sweep (every component set × no host tier and each
    write policy × sessions off and on × pages 1 and 4), 150 steps a config."""
    from workbench.model.fuzzing.sweep import against_configs

    configs = against_configs()
    assert len({(c.components, c.hicache, c.sessions, c.page_size) for c in configs}) == len(configs) == 64
    tasks = plan(configs, [0], 150, episode_steps=150)
    campaign = run_campaign(tasks, 2, shrink=False, episode=differential_episode)
    assert campaign.steps_run == 64 * 150
    assert not campaign.findings, [(r.config.label(), r.finding) for r in campaign.findings]


def _evict_a_token_once_the_tree_has_two_nodes(session, step_index):
    """Our side drifts from SGLang's: a token evicted that SGLang still holds."""
    if len(session.cache.tree.nodes) > 2:
        session.cache.evict(EvictParams(num_tokens=1))


@pytest.fixture
def drifting_ours(monkeypatch):
    def perturbed(scenario, core="python", allow_version=False, every=1, perturb=None, kv_events=False):
        return run_against(scenario, core, allow_version, every, _evict_a_token_once_the_tree_has_two_nodes)

    monkeypatch.setattr(differential_fuzz, "run_against", perturbed)


def test_a_divergence_is_found_shrunk_and_written_as_a_replayable_scenario(drifting_ours, tmp_path):
    tasks = plan([FuzzConfig(("full",), 1)], [0], 200, episode_steps=200)
    campaign = run_campaign(tasks, 1, shrink_budget=30, episode=differential_episode, shrinker=shrink_divergence)
    assert len(campaign.findings) == 1
    found = campaign.findings[0]
    assert found.finding.kind == "divergence" and "SGLang" in found.finding.message
    assert found.shrunk and len(found.shrunk) <= 4  # two inserts make two nodes; the rest is noise
    path = tmp_path / "diverges.toml"
    path.write_text(scenario_toml(divergence_scenario(found, "diverges")))
    replay = run_against(load_scenario(path), perturb=_evict_a_token_once_the_tree_has_two_nodes)
    assert replay.divergence is not None and replay.divergence.difference.field == found.finding.name
    assert run_against(load_scenario(path)).agrees  # without the drift the two caches agree


def test_cli_fuzz_against_sglang(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "workbench", "fuzz", "--against", "sglang", "--config", "full,swa",
                           "--steps", "200", "--jobs", "1", "--json"], cwd=tmp_path, capture_output=True, text=True,
                          env=env)
    assert done.returncode == 0, done.stderr
    assert '"against": "sglang"' in done.stdout and '"finding": null' in done.stdout
    refused = subprocess.run([sys.executable, "-m", "workbench", "fuzz", "--against", "sglang", "--fault",
                              "lock-skips-matched-node"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and "SGLang's side runs no fault" in refused.stderr


def test_the_divergences_the_campaigns_found_now_agree():
    """Found by ``urc fuzz --against sglang`` (README: "Differential fuzzing of SGLang")
    and kept in ``scenarios/against/`` once both sides agreed: a key-only load_back whose
    carrier row took a Mamba slot SGLang then asserted on (page 1, and the extra buffer's
    count at page 2), the load called off when the node's state finds no slot, a
    load-back admission refused before a state is evicted for it, and three write-back
    runs where a load-back was acknowledged before the admission's own eviction; beside
    them, EAGLE prefetches from storage (written when the storage tier took EAGLE keys), and
    two found by the differential fuzz of the storage tier: a flush's prefetches taking host
    slots in turn, and write-back's stores host-locked through their eviction."""
    found = sorted((ROOT / "scenarios" / "against").glob("*.toml"))
    assert len(found) >= 7
    for path in found:
        scenario = load_scenario(path)
        report = run_against(scenario)
        assert report.agrees and report.run == len(scenario.steps), (path.name, report.divergence)


def test_a_planted_write_back_divergence_shrinks_to_a_few_steps(monkeypatch, tmp_path, capsys):
    """Ours made to acknowledge a write-back eviction's stores inside the eviction again
    (the scheduler step made a no-op): a 2,000-step hybrid episode with a storage tier
    parts from SGLang on the SWA host LRU order, and both the fuzzer's shrinker and
    ``urc shrink --against sglang`` cut it to a few steps."""
    import contextlib

    from cache.tiers.host import HostTier
    from urc_util import urc
    from workbench.model.scenarios.writer import scenario_jsonl

    monkeypatch.setattr(HostTier, "scheduler_step", lambda self: contextlib.nullcontext())
    config = FuzzConfig(("full", "swa"), 1, 4, mamba_size=12, hicache="write_back", storage="best_effort")
    found = next(r for r in (differential_episode(config, seed=2, episode=e, steps=2000) for e in range(4))
                 if r.finding is not None)
    assert found.finding.name.startswith("lru.") and found.finding.name.endswith("_host"), found.finding
    shrunk = shrink_divergence(found, 180)
    assert len(shrunk.shrunk) <= 20
    trace = tmp_path / "episode.jsonl"
    trace.write_text(scenario_jsonl(differential_fuzz.scenario_of(config, found.raw_steps)))
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "shrink", str(trace), "--against", "sglang", "--budget", "180", "--json")
    assert rc == 0, err
    assert '"steps": ' in out and int(out.split('"steps": ')[1].split(",")[0]) <= 20


def test_shrink_against_refuses_a_divergence_after_our_own_check_fails(monkeypatch, tmp_path, capsys):
    """A divergence that comes after our invariants already failed cannot be shrunk as
    a divergence (no candidate keeps it and passes our checks): one line, exit 2."""
    from urc_util import urc
    from workbench.model.fuzzing.fuzz import Finding

    repro = ROOT / "scenarios" / "fuzz" / "swa-recovery-stale-mapping.toml"  # swa.orphan at its last step
    flagged = len(load_scenario(repro).steps)
    path = tmp_path / "late.toml"
    path.write_text(repro.read_text() + '\n[[step]]\nop = "check"\n')
    monkeypatch.setattr(differential_fuzz, "first_divergence",
                        lambda scenario: Finding("divergence", "pools.full.available", flagged + 1, "planted"))
    out = tmp_path / "out.toml"
    rc, _, err = urc(capsys, "shrink", str(path), "--against", "sglang", "-o", str(out))
    assert rc == 2 and not out.exists()
    assert f"step {flagged}: ours fails invariant swa.orphan before the divergence at step {flagged + 1}" in err
    assert len(err.strip().splitlines()) == 1
