"""The storage tier against SGLang 0.5.23's real file storage on the CPU
(workbench/bridge/sglang_storage.py): after every step the stored page hashes, the stores
in flight and the host locks they hold agree. Skipped without SGLang, as
test_bridge_sglang.py (URC_REQUIRE_SGLANG=1 turns the skip into a failure)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from sglang_util import requires_sglang

pytestmark = requires_sglang()

from workbench.bridge.differential import run_against  # noqa: E402
from workbench.model.scenarios.scenario import load_scenario, scenario_from_records  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "storage_backup.toml"


def test_the_storage_scenario_agrees_step_by_step():
    report = run_against(load_scenario(SCENARIO))
    assert report.agrees and report.run == report.steps == report.states_compared == 9


def _drop_a_stored_page(session, step_index):
    if step_index == 5:  # the store was just acknowledged
        backend = session.cache.host.storage.backend
        backend._pages.pop(backend.stored_keys()[0])


def _release_a_store_lock(session, step_index):
    if step_index == 2:  # the store is in flight, its node host-locked
        cache = session.cache
        store = cache.host.storage.in_flight[0]
        cache.host.storage.settle([store])  # acknowledged early: written, lock released


def test_a_missing_page_and_an_early_store_ack_are_caught():
    d = run_against(load_scenario(SCENARIO), perturb=_drop_a_stored_page).divergence
    assert d is not None and d.step == 5 and d.difference.field == "storage.keys"
    d = run_against(load_scenario(SCENARIO), perturb=_release_a_store_lock).divergence
    assert d is not None and d.step == 2 and d.difference.field == "storage.keys"


RANDOM = [(policy, transfers, page, 2) for policy, transfers in (
    ("write_through", "immediate"), ("write_through_selective", "immediate"), ("write_back", "immediate"),
    ("write_through", "held"), ("write_through_selective", "held"), ("write_back", "held")) for page in (1, 4)]
RANDOM.append(("write_back", "held", 4, 3))  # reaches a write-back leaf kept on the device: a store in flight below


@pytest.mark.parametrize("policy, transfers, page, seed", RANDOM, ids=[f"{p}-{t}-p{g}-s{s}" for p, t, g, s in RANDOM])
def test_random_sequences_with_storage_agree_with_sglang(policy, transfers, page, seed):
    """The fuzzer's host-tier steps, with a storage tier below the host: the stored keys,
    stores in flight and their host locks agree with SGLang's after every step."""
    from workbench.model.fuzzing.config import FuzzConfig
    from workbench.model.fuzzing.fuzz import LockstepRun, OpGenerator

    config = FuzzConfig(("full",), page, hicache=policy)
    run = LockstepRun(config, checks=False)
    for raw in itertools.islice(OpGenerator(config, seed), 300):
        run.step(raw)
    scenario_config = config.scenario_config()
    scenario_config["hicache"] = {**scenario_config["hicache"], "transfers": transfers, "storage": {"backend": "memory"}}
    header = {"schema": 1, "scenario": {"name": "storage-random"}, "config": scenario_config}
    report = run_against(scenario_from_records(header, run.steps))
    assert report.agrees, report.divergence.as_dict()
    assert report.states_compared == report.run > 200
