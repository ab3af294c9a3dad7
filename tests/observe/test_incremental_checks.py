"""Per-step checks cost what a step changed, yet flag a corruption at the same step
and with the same names as a full sweep after every step. Each case corrupts, right
after one op, something that op touched (the failure mode of one invariant), then
runs the scenario both ways."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import workbench.model.timeline.driver as driver_module
from workbench.model.timeline.runner import Runner
from workbench.model.scenarios.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
TOUR = ROOT / "scenarios" / "tour.toml"
TOUR_SWA = ROOT / "scenarios" / "tour_swa.toml"
TOUR_MAMBA = ROOT / "scenarios" / "tour_mamba.toml"


def last_touched(cache, component: int = 0):
    """The most recently added live node that holds this component's data."""
    nodes = [n for n in cache.tree.nodes.values() if n is not cache.tree.root and n.data[component].value is not None]
    return max(nodes, key=lambda n: n.id) if nodes else None


def bump_lock(cache):
    node = last_touched(cache)
    node.data[0].lock_ref += 1


def drift_evictable(cache):
    cache.tree.evictable[0] += 1


def wrong_slot(cache):
    node = last_touched(cache)
    node.data[0].value = node.data[0].value.clone()
    node.data[0].value[0] = (node.data[0].value[0] + 1) % cache.kv_pool.size


def drop_leaf_flag(cache):
    node = next(n for n in cache.tree.nodes.values() if n.in_leaf_set)
    node.in_leaf_set = False  # the flag says "not an evictable leaf" while the leaf set still holds it


def unlist_swa(cache):
    swa = cache.by_name["swa"]
    node = last_touched(cache, swa.index)
    cache.tree.lru["swa"].remove(node)


def forget_mamba_state(cache):
    mamba = cache.by_name["mamba"]
    node = last_touched(cache, mamba.index)
    node.data[mamba.index].value = torch.tensor([(int(node.data[mamba.index].value[0]) + 1) % mamba.pool.size])


CASES = [
    (TOUR, 2, bump_lock),
    (TOUR, 5, drift_evictable),
    (TOUR, 2, wrong_slot),
    (TOUR, 1, drop_leaf_flag),
    (TOUR_SWA, 3, unlist_swa),
    (TOUR_MAMBA, 2, forget_mamba_state),
]


def flagged(path: Path, at: int, corrupt, monkeypatch, full: bool) -> list[tuple[int, tuple[str, ...]]]:
    real = driver_module.CacheDriver.run
    calls = {"n": 0}

    def run(self, op, fields, *packed):
        result = real(self, op, fields, *packed)
        calls["n"] += 1
        if calls["n"] == at:
            corrupt(self.cache)
        return result

    monkeypatch.setattr(driver_module.CacheDriver, "run", run)
    runner = Runner(load_scenario(path), full_checks=full)
    out = []
    while not runner.done:
        try:
            record = runner.step()
        except Exception:  # a corrupted cache may make a later op fail outright: stop comparing there
            break
        if record.violations:
            out.append((record.index, tuple(sorted({v.name for v in record.violations}))))
    monkeypatch.setattr(driver_module.CacheDriver, "run", real)
    return out


@pytest.mark.parametrize("path, at, corrupt", CASES, ids=[c[2].__name__ for c in CASES])
def test_incremental_checks_flag_the_same_step_as_the_full_sweep(path, at, corrupt, monkeypatch):
    full = flagged(path, at, corrupt, monkeypatch, full=True)
    incremental = flagged(path, at, corrupt, monkeypatch, full=False)
    assert full, "the corruption must be detectable"
    assert full[0][0] == at  # found right after the op it followed
    assert incremental[0] == full[0]  # same step, same names


# ---- the host tier: a tree big enough that per-step checks probe rather than sweep ----
HOST_STEPS = [{"op": "insert", "key": [100 + k, 2, 3, 4, 5, 6, 7, 8]} for k in range(24)] + [
    {"op": "flush"},
    {"op": "evict", "full": 8},  # step 26: demotes the oldest leaf
    {"op": "match", "key": [100, 2, 3, 4, 5, 6, 7, 8]},
    {"op": "load_back", "key": [100, 2, 3, 4, 5, 6, 7, 8]},  # step 28: held in flight
    {"op": "evict", "full": 16},
    {"op": "flush"},
]
HOST_CONFIG = {"components": ["full", "swa", "mamba"], "kv_size": 256, "sliding_window": 4, "mamba_size": 32,
               "hicache": {"write_policy": "write_through", "load_back_threshold": 1, "transfers": "held"}}


def host_only_node(cache):
    return next(n for n in cache.tree.nodes.values() if n.data[0].value is None and n.data[0].host_value is not None)


def drift_host_held(cache):
    cache.tree.host_held += 1


def unlist_host_swa(cache):
    cache.tree.host_lru["swa"].remove(host_only_node(cache))


def stale_transfer_mark(cache):
    node = max((n for n in cache.tree.nodes.values() if n is not cache.tree.root), key=lambda n: n.id)
    node.data[0].metadata["transfer"] = ("backup", 999)


HOST_CASES = [(26, drift_host_held), (26, unlist_host_swa), (24, stale_transfer_mark)]


@pytest.mark.parametrize("at, corrupt", HOST_CASES, ids=[c[1].__name__ for c in HOST_CASES])
def test_host_tier_incremental_checks_flag_the_same_step_as_the_full_sweep(at, corrupt, monkeypatch, tmp_path):
    import json

    path = tmp_path / "host.jsonl"
    header = {"schema": 1, "scenario": {"name": "host"}, "config": HOST_CONFIG}
    path.write_text("\n".join(json.dumps(x) for x in [header, *HOST_STEPS]) + "\n")
    full = flagged(path, at, corrupt, monkeypatch, full=True)
    incremental = flagged(path, at, corrupt, monkeypatch, full=False)
    assert full and full[0][0] == at
    assert incremental[0] == full[0]


def test_a_healthy_host_tier_run_is_probed_not_swept(monkeypatch, tmp_path):
    import json

    import cache.checks.invariants as invariants

    path = tmp_path / "host.jsonl"
    header = {"schema": 1, "scenario": {"name": "host"}, "config": HOST_CONFIG}
    path.write_text("\n".join(json.dumps(x) for x in [header, *HOST_STEPS]) + "\n")
    sweeps = []
    real = invariants._sweep
    monkeypatch.setattr(invariants, "_sweep", lambda cache: sweeps.append(1) or real(cache))
    runner = Runner(load_scenario(path), full_checks=False, sweep_every=10**9)
    timeline = runner.run()
    assert timeline.passed
    assert len(sweeps) < 12  # the first steps sweep (a small tree); the rest are probed
