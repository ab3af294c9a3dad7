"""``urc fuzz --against sglang``: the fuzzer's steps run on SGLang 0.5.23's cache too.

An episode is generated and checked on our cache exactly as ``urc fuzz`` does (the
generator reads our state to make valid steps), then the same steps run on both caches
in lockstep through the bridge (``differential.run_against``): op results after every
step, the whole state every ``COMPARE_EVERY`` steps and after the last. A difference —
including SGLang refusing or asserting on a step ours ran, or running one ours
refused — is a finding, shrunk to the fewest steps that still diverge on the same
field, and written as a scenario that ``urc run FILE --against sglang`` replays with
both sides shown. Our own failed check on a generated step stays a finding too (a bug
of ours, reported as ``urc fuzz`` reports it).

Faults are left out on SGLang's side by design (``differential.py``), so a campaign
against SGLang runs unfaulted configs: what it hunts is where the two caches differ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Optional

from ..model.fuzzing.config import FuzzConfig
from ..model.fuzzing.fuzz import Finding, FuzzResult, run_episode
from ..model.fuzzing.shrink import Steps
from ..model.scenarios.scenario import Scenario, scenario_from_records
from .differential import DifferentialReport, run_against

COMPARE_EVERY = 8  # steps between whole-state comparisons (op results are compared at every step)
KIND = "divergence"


def scenario_of(config: FuzzConfig, steps: Steps, name: str = "fuzz-against-sglang") -> Scenario:
    header = {"schema": 1, "scenario": {"name": name, "source": "urc fuzz --against sglang"},
              "config": config.scenario_config()}
    return scenario_from_records(header, steps, name)


def compare(config: FuzzConfig, steps: Steps, every: int = COMPARE_EVERY) -> DifferentialReport:
    return run_against(scenario_of(config, steps), every=every)


def divergence_finding(report: DifferentialReport) -> Optional[Finding]:
    d = report.divergence
    if d is None:
        return None
    diff = d.difference
    where = f" at {diff.where}" if diff.where else ""
    return Finding(KIND, diff.field, d.step, f"{d.op}{where}: ours {_short(diff.ours)}; SGLang {_short(diff.theirs)}")


def differential_episode(config: FuzzConfig, seed: int, episode: int, steps: int,
                         time_budget: Optional[float] = None, on_step: Optional[Callable[[int], None]] = None,
                         checks: bool = True, full_checks: bool = False) -> FuzzResult:
    """``run_episode``'s episode, then its steps on both caches (same signature, so a
    campaign runs it in place of ``run_episode``)."""
    result = run_episode(config, seed, episode, steps, time_budget, on_step, checks, full_checks)
    if result.finding is not None:  # our own check failed: that is the finding
        return result
    report = compare(config, result.raw_steps)
    if report.skipped:
        raise ValueError(f"{config.label()}: not run against SGLang: {report.skipped}")
    result.finding = divergence_finding(report)
    return result


def shrink_divergence(result: FuzzResult, budget_s: Optional[float] = 60.0) -> FuzzResult:
    """Shrink a divergence to the fewest steps that still diverge on the same field
    (our own failures shrink as ``urc fuzz`` shrinks them)."""
    target = result.finding
    if target is None or target.kind != KIND:
        from ..model.fuzzing.fuzz import shrink_result

        return shrink_result(result, budget_s)

    from ..model.fuzzing.shrink_file import DIVERGENCE, Target, runnable, shrink_to_target

    # urc shrink --against sglang's own path: its first cut, the shrinker, the same oracle
    scenario = scenario_of(result.config, result.raw_steps[: target.step])
    exact = first_divergence(scenario)  # compared every step: where it first shows (the episode compared every 8)
    if exact is not None and target.same_way(exact):
        target = exact
    outcome = shrink_to_target(scenario, Target(DIVERGENCE, target.step, target), budget_s,
                               diverges=first_divergence, lower_pools=False)  # the config stays the fuzzer's
    result.shrunk = runnable(outcome.steps)
    result.shrink_runs = outcome.runs
    return result


def first_divergence(scenario: Scenario) -> Optional[Finding]:
    """Where ``scenario``, run on both caches (states compared every step), first parts
    from SGLang 0.5.23 (``urc shrink --against sglang``'s target and oracle)."""
    return divergence_finding(run_against(scenario, every=1))


def divergence_scenario(result: FuzzResult, name: str) -> Scenario:
    """The shrunk divergence as a scenario file: its steps as run, no expectations (the
    reference is SGLang: ``urc run FILE --against sglang`` shows both sides)."""
    finding = result.finding
    scenario = scenario_of(result.config, result.shrunk or result.raw_steps, name)
    description = (f"urc fuzz --against sglang, seed {result.seed}, episode {result.episode}: step "
                   f"{finding.step} of the run diverged from SGLang 0.5.23 on {finding.name} ({finding.message}); "
                   "replay it with urc run FILE --against sglang")
    return dataclasses.replace(scenario, description=description, meta={**scenario.meta, "description": description})


def _short(value) -> str:
    text = str(value)
    return text if len(text) <= 160 else text[:157] + "..."
