"""Prefetch from storage against SGLang 0.5.23's real storage path on the CPU
(workbench/bridge/sglang_prefetch.py): after every step the prefetches in flight, the
tokens they hold against the budget, their anchors' host locks and SGLang's prefetch
outcome counters agree, and so do every op's results (issued, done, prefetched,
storage_hit_length). Skipped without SGLang (sglang_util.py)."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from sglang_util import requires_sglang

pytestmark = requires_sglang()

from workbench.bridge.differential import run_against  # noqa: E402
from workbench.model.scenarios.scenario import load_scenario, scenario_from_records  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOUR = ROOT / "scenarios" / "tour_storage.toml"


def _tour_with(**storage):
    """The storage tour's steps without their expectations, under other storage settings."""
    scenario = load_scenario(TOUR)
    config = dict(scenario.config)
    config["hicache"] = {**config["hicache"], "storage": {**config["hicache"]["storage"], **storage}}
    steps = [{k: v for k, v in step.raw.items() if k not in ("expect", "description")} for step in scenario.steps]
    return scenario_from_records({"schema": 1, "scenario": {"name": "tour-variant"}, "config": config}, steps)


def test_the_storage_tour_agrees_step_by_step():
    report = run_against(load_scenario(TOUR))
    assert report.agrees, report.divergence.as_dict()
    assert report.states_compared == report.run == 13


@pytest.mark.parametrize("policy", ["wait_complete", "timeout"])
def test_the_tour_under_the_other_stop_policies_agrees(policy):
    report = run_against(_tour_with(prefetch_policy=policy, prefetch_timeout_base=0))
    assert report.agrees, report.divergence.as_dict()


def _forget_the_anchor_lock(session, step_index):
    if step_index == 7:  # right after the first prefetch: ours no longer counts its tokens
        session.cache.host.storage.prefetch.occupied = 0


def test_a_prefetch_budget_that_drifts_is_caught():
    d = run_against(load_scenario(TOUR), perturb=_forget_the_anchor_lock).divergence
    assert d is not None and d.step == 7 and d.difference.field == "storage.prefetch_occupied"


RANDOM = [(write, stop, transfers, page) for write, stop, transfers in (
    ("write_through", "best_effort", "immediate"), ("write_through", "wait_complete", "held"),
    ("write_through_selective", "timeout", "held"), ("write_back", "best_effort", "immediate"))
    for page in (1, 4)]


@pytest.mark.parametrize("write, stop, transfers, page", RANDOM, ids=["-".join(map(str, r)) for r in RANDOM])
def test_random_sequences_with_prefetches_agree_with_sglang(write, stop, transfers, page):
    """The fuzzer's steps with a storage tier and its prefetch ops."""
    from workbench.model.fuzzing.config import FuzzConfig
    from workbench.model.fuzzing.fuzz import LockstepRun, OpGenerator

    config = FuzzConfig(("full",), page, hicache=write, storage=stop)
    run = LockstepRun(config, checks=False)
    for raw in itertools.islice(OpGenerator(config, 1), 200):
        run.step(raw)
    assert sum(1 for step in run.steps if step["op"] == "prefetch") >= 3
    scenario_config = config.scenario_config()
    scenario_config["hicache"] = {**scenario_config["hicache"], "transfers": transfers}
    header = {"schema": 1, "scenario": {"name": "prefetch-random"}, "config": scenario_config}
    report = run_against(scenario_from_records(header, run.steps))
    assert report.agrees, report.divergence.as_dict()


def test_the_hybrid_storage_scenario_agrees_step_by_step():
    """SWA windows and Mamba states stored, prefetched all or nothing, loaded back."""
    report = run_against(load_scenario(ROOT / "scenarios" / "storage_hybrid.toml"))
    assert report.agrees, report.divergence.as_dict()
    assert report.states_compared == report.run == 10


# SWA only: a random run with Mamba soon reaches a key-only load_back SGLang asserts on (its
# request-less Mamba slot), before and without the storage tier; storage_hybrid.toml covers Mamba
HYBRID = [(("full", "swa"), 1, "write_through"), (("full", "swa"), 1, "write_back"), (("full", "swa"), 4, "write_through")]


@pytest.mark.parametrize("components, page, write", HYBRID, ids=["+".join(c) + f"-p{p}-{w}" for c, p, w in HYBRID])
def test_random_hybrid_sequences_with_prefetches_agree_with_sglang(components, page, write):
    """The fuzzer's steps with SWA and Mamba stored too, immediate transfers."""
    from workbench.model.fuzzing.config import FuzzConfig
    from workbench.model.fuzzing.fuzz import LockstepRun, OpGenerator

    config = FuzzConfig(components, page, 4 if page == 1 else 8, mamba_size=12, hicache=write, storage="best_effort")
    run = LockstepRun(config, checks=False)
    for raw in itertools.islice(OpGenerator(config, 2), 150):
        run.step(raw)
    prefetched = sum(1 for step in run.steps if step["op"] == "prefetch")
    assert prefetched >= 3
    header = {"schema": 1, "scenario": {"name": "hybrid-prefetch-random"}, "config": config.scenario_config()}
    report = run_against(scenario_from_records(header, run.steps))
    assert report.agrees, report.divergence.as_dict()


def test_a_scripted_delay_holds_both_sides_the_same_flushes():
    """sglang-9927's scenario: the hit query delayed two flushes (an injected delay, asked
    by both sides of the same rules), a wait_complete poll in between."""
    report = run_against(load_scenario(ROOT / "scenarios" / "bugs" / "sglang-9927-prefetch-poll-drops-unfinished.toml"))
    assert report.agrees and not report.skipped, report.divergence.as_dict() if report.divergence else report.skipped
    assert report.states_compared == report.run == 8


def test_a_failure_rule_is_still_skipped_saying_why():
    scenario = _tour_with(inject=[{"call": "get", "outcome": "fail", "nth_page": 1}])
    report = run_against(scenario)
    assert report.skipped and "only delay rules are bridged" in report.skipped


DELAYED = [(write, stop, transfers) for write, stop, transfers in (
    ("write_through", "wait_complete", "held"), ("write_back", "timeout", "held"),
    ("write_through_selective", "best_effort", "immediate"))]


@pytest.mark.parametrize("write, stop, transfers", DELAYED, ids=["-".join(d) for d in DELAYED])
def test_random_delayed_prefetches_agree_with_sglang(write, stop, transfers):
    """The fuzzer's delayed storage configs (each hit query held two flushes), so
    admission polls find prefetches unfinished."""
    from workbench.model.fuzzing.config import FuzzConfig
    from workbench.model.fuzzing.fuzz import LockstepRun, OpGenerator

    config = FuzzConfig(("full",), 4, hicache=write, storage=stop, delayed=True)
    run = LockstepRun(config, checks=False)
    for raw in itertools.islice(OpGenerator(config, 1), 150):
        run.step(raw)
    scenario_config = config.scenario_config()
    scenario_config["hicache"] = {**scenario_config["hicache"], "transfers": transfers}
    header = {"schema": 1, "scenario": {"name": "delayed-random"}, "config": scenario_config}
    report = run_against(scenario_from_records(header, run.steps))
    assert report.agrees and not report.skipped, report.divergence.as_dict()
    assert sum(1 for step in run.steps if step["op"] == "prefetch_progress") >= 3


EAGLE_SEEDS = (1, 25, 3)  # per EAGLE storage config, in STORAGE_CONFIGS' order: a seed whose run fetches pages


def _eagle_storage_runs():
    from workbench.model.fuzzing.sweep import STORAGE_CONFIGS

    return list(zip([c for c in STORAGE_CONFIGS if c.option("is_eagle")], EAGLE_SEEDS, strict=True))


@pytest.mark.parametrize("config, seed", _eagle_storage_runs(), ids=lambda v: v.label() if hasattr(v, "label") else str(v))
def test_random_eagle_sequences_with_prefetches_agree_with_sglang(config, seed):
    """The fuzzer's EAGLE storage configs: pages stored and prefetched by their pairs'
    hashes (the stored keys compared page by page), spans counted in pairs, and at
    least one prefetch that brought pages back."""
    from workbench.model.fuzzing.fuzz import LockstepRun, OpGenerator

    config = dataclasses.replace(config, storage="best_effort")
    run = LockstepRun(config, checks=False)
    for raw in itertools.islice(OpGenerator(config, seed), 200):
        run.step(raw)
    assert run.runner.cache.snapshot().metrics["prefetched_tokens"] > 0
    header = {"schema": 1, "scenario": {"name": "eagle-prefetch-random"}, "config": config.scenario_config()}
    report = run_against(scenario_from_records(header, run.steps))
    assert report.agrees and not report.skipped, report.divergence.as_dict() if report.divergence else report.skipped


def test_the_eagle_prefetch_scenario_agrees_step_by_step():
    """Two prefetches under EAGLE keys, below a device anchor and then a fetched node."""
    report = run_against(load_scenario(ROOT / "scenarios" / "against" / "eagle-prefetch-from-storage.toml"))
    assert report.agrees, report.divergence.as_dict()
    assert report.states_compared == report.run == 17
