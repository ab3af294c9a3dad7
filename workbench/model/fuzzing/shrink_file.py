"""Any failing or diverging run cut down to a minimal scenario (``urc shrink``).

The input is whatever ``urc run`` reads (a scenario, a JSONL trace, a recording) or a
stored run. What to keep is its *target*: the first failed check (the default), the
first step where a ``--until`` condition holds, or the first divergence from SGLang.
The steps after the target's step cannot matter and go first; the rest go through the
fuzzer's own shrinker (``shrink.Shrinker``: chunks with the steps that use their names,
single steps, shorter keys, smaller amounts, then names and tokens renumbered), with an
oracle that runs each candidate as ``urc run`` would. Each step carries the input line
it came from, so the written scenario says where every step came from.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

from ..scenarios.scenario import Scenario, ScenarioError, scenario_from_records
from .fuzz import Finding, findings, first_finding
from .shrink import Shrinker, Steps, pressure_steps, with_definers
from .shrink_tail import AT_TARGET, LONG, ORIGIN, tail_cut

PRIVATE = (ORIGIN, AT_TARGET)
CHECK, UNTIL, DIVERGENCE = "failed_check", "condition", "divergence"


@dataclasses.dataclass(frozen=True)
class Target:
    """What the shrunk scenario must still do, and where the input first does it."""

    kind: str  # CHECK, UNTIL or DIVERGENCE
    step: int  # 1-based, in the input
    finding: Optional[Finding] = None  # CHECK and DIVERGENCE: the check or field
    conditions: tuple = ()  # UNTIL: the parsed conditions (any of them)
    text: str = ""  # UNTIL: the conditions as typed

    def describe(self) -> str:
        if self.kind == UNTIL:
            return f"{self.text} holds"
        what = self.finding.check if self.kind == CHECK else f"diverges from SGLang 0.5.23 on {self.finding.name}"
        return what if self.kind == DIVERGENCE else f"fails {what}"


@dataclasses.dataclass
class ShrinkOutcome:
    steps: Steps  # the shrunk steps, each with its ORIGIN
    runs: int  # candidates run
    seconds: float
    interrupted: bool  # Ctrl-C: the best found so far
    cut_from: int  # the steps before the target's step was reached (the input's length up to it)
    fails_the_same_way: bool = True  # as written, its first failed check is the target's (urc run's view)
    config: Optional[dict] = None  # the input's config with its pools lowered (None: the input's)


def header_of(scenario: Scenario) -> dict[str, Any]:
    return {"schema": 1, "scenario": {"name": scenario.name}, "config": dict(scenario.config)}


def steps_upto(scenario: Scenario, step: int) -> Steps:
    """The input's first ``step`` steps as written, each marked with its line (and the
    last as the target's)."""
    out = [{**s.raw, ORIGIN: s.line} for s in scenario.steps[:step]]
    if out:
        out[-1][AT_TARGET] = True
    return out


def runnable(steps: Steps) -> Steps:
    return [{k: v for k, v in s.items() if k not in PRIVATE} for s in steps]


def relaxed(steps: Steps, target: Target) -> Steps:
    """The steps without the expectations the target does not need: a dropped step
    changes what later steps see, and a changed result is not the failure being kept.
    (``expect_error`` stays: the loader reads a second unlock's as its licence.)"""
    field = target.finding.name if target.finding is not None and target.finding.kind == "expectation" else None
    out = []
    for step in steps:
        new = {k: v for k, v in step.items() if k != "expect"}
        if field is not None and step.get(AT_TARGET) and field in step.get("expect", {}):
            new["expect"] = {field: step["expect"][field]}
        out.append(new)
    return out


# ---- the target -----------------------------------------------------------------------------------

def first_check_failed(scenario: Scenario, timeline=None) -> Optional[Target]:
    """The first failed check of ``scenario`` run as ``urc run`` runs it; a stored run
    (``timeline``, a ``DiskTimeline``) indexes its failing steps: no run needed."""
    if timeline is not None:
        for index in timeline.store.failing_indexes():  # step numbers: records[i] is step i + 1
            found = findings(timeline.records[index - 1])
            if found:
                return Target(CHECK, index, found[0])
        return None
    found = first_finding(scenario)
    return None if found is None else Target(CHECK, found.step, found)


def first_holding(scenario: Scenario, conditions: Sequence, text: str) -> Optional[Target]:
    """The first step where one of ``conditions`` (``urc run --until``'s) holds."""
    index = _first_holding(scenario, conditions)
    return None if index is None else Target(UNTIL, index, conditions=tuple(conditions), text=text)


def _first_holding(scenario: Scenario, conditions: Sequence) -> Optional[int]:
    from ..timeline.runner import Runner
    from ..timeline.search import any_holds

    runner = Runner(scenario)
    while not runner.done:
        record = runner.step()
        if any_holds(runner.timeline, conditions, record.index) is not None:
            return record.index
    return None


Diverges = Callable[[Scenario], Optional[Finding]]  # the bridge's: a scenario's first divergence from SGLang


def oracle(target: Target, header: dict[str, Any], diverges: Optional[Diverges] = None) -> Callable[[Steps], bool]:
    """Does a candidate still do what the target says? Run as ``urc run`` (or against
    SGLang, by ``diverges``) would; a candidate that is no valid scenario does not."""

    def still(steps: Steps) -> bool:
        try:
            scenario = scenario_from_records(header, runnable(relaxed(steps, target)))
        except ScenarioError:
            return False
        if target.kind == UNTIL:
            return _first_holding(scenario, target.conditions) is not None
        if target.kind == DIVERGENCE:
            found = diverges(scenario)
            return target.finding.same_way(found) and _checks_hold_before(scenario, found.step)
        return _fails_like(scenario, target.finding)

    return still


def _checks_hold_before(scenario: Scenario, step: int) -> bool:
    """Do our invariants and fingerprints hold on every step before ``step``? A
    divergence shrunk through a state our own checks reject (a known upstream bug's,
    say) is no longer the divergence that was found."""
    return first_violation_before(scenario, step) is None


def first_violation_before(scenario: Scenario, step: int) -> Optional[tuple[int, str]]:
    """The first step before ``step`` where our invariants or fingerprints fail, and
    the first check that failed there (None: they hold on every one)."""
    from ..timeline.runner import Runner

    runner = Runner(scenario, refusals_ok=True)
    while not runner.done:
        record = runner.step()
        if record.index >= step:
            return None
        if record.violations:
            return record.index, record.violations[0].name
    return None


def _fails_like(scenario: Scenario, finding: Finding) -> bool:
    """Does some step fail ``finding``'s check? Refused ops are outcomes here (which a
    step's fate depends on what was dropped before it), unless the check is an error."""
    from ..timeline.runner import Runner

    runner = Runner(scenario, refusals_ok=finding.kind != "error")
    while not runner.done:
        if any(finding.same_way(found) for found in findings(runner.step())):
            return True
    return False


def pin_refusals(header: dict[str, Any], steps: Steps, target: Target) -> Steps:
    """The shrunk steps as ``urc run`` must read them: each op refused now marked
    ``expect_error`` (with its error), a mark on an op that now succeeds dropped, so
    the written scenario's first failure is the target's."""
    from ..timeline.runner import Runner

    steps = relaxed(steps, target)
    if target.finding is not None and target.finding.kind == "error":
        return steps
    try:
        scenario = scenario_from_records(header, runnable(steps))
    except ScenarioError:
        return steps
    runner = Runner(scenario, refusals_ok=True)
    out = []
    for step in steps:
        record = runner.step()
        new = dict(step)
        if record.error is not None and "expect_error" not in new:
            new["expect_error"] = record.error.split(": ", 1)[-1]
        elif record.error is None and "expect_error" in new and not step.get(AT_TARGET):
            del new["expect_error"]
        out.append(new)
    return out


# ---- shrinking ------------------------------------------------------------------------------------

def shrink_to_target(scenario: Scenario, target: Target, budget_s: Optional[float] = None,
                     on_progress: Optional[Callable[[int, int], None]] = None,
                     diverges: Optional[Diverges] = None, lower_pools: bool = True) -> ShrinkOutcome:
    """The input's steps up to the target's, shrunk while the oracle holds (until
    ``budget_s`` runs out, or Ctrl-C: then the best so far)."""
    start = time.monotonic()
    page = int(scenario.config.get("page_size", 1) or 1)
    shrinker = Shrinker(oracle(target, header_of(scenario), diverges), budget_s, page, on_progress=on_progress,
                        pressure=pressure_steps(scenario.config))
    steps = None
    if target.step > LONG:  # read once, never held whole: a tail slice that still does it
        steps = tail_cut(scenario.steps, target.step, shrinker.attempt, shrinker.out_of_time)
    if steps is None:
        steps = steps_upto(scenario, target.step)
    best = shrinker.shrink(steps, first_cut=_last_steps_that_do)
    header = header_of(scenario)
    if lower_pools and not shrinker.interrupted and not shrinker.out_of_time():
        header = _smaller_pools(header, best, target, diverges, shrinker)
    same = True
    if target.kind == CHECK:
        best = pin_refusals(header, best, target)
        try:
            first = first_finding(scenario_from_records(header, runnable(best)))
        except ScenarioError:
            first = None
        same = target.finding.same_way(first)
    return ShrinkOutcome(best, shrinker.runs, time.monotonic() - start, shrinker.interrupted, target.step, same,
                         header["config"])


POOL_FIELDS = ("kv_size", "swa_kv_size", "mamba_size")  # the config's pool sizes, lowered last


def _smaller_pools(header: dict, steps: Steps, target: Target, diverges: Optional[Diverges],
                   shrinker: Shrinker) -> dict:
    """The config with each pool as small as the shrunk steps still allow (halved, then
    a page less, while the oracle holds): a small pool makes a repro's evictions plain."""
    page = int(header["config"].get("page_size", 1) or 1)
    for field in POOL_FIELDS:
        value = header["config"].get(field)
        while type(value) is int and value > page and not shrinker.out_of_time():
            for lower in (value // 2 // page * page, value - page):
                if lower <= 0:
                    continue
                candidate = {**header, "config": {**header["config"], field: lower}}
                shrinker.runs += 1
                if oracle(target, candidate, diverges)(steps):
                    header, value = candidate, lower
                    break
            else:
                break
    return header


def _last_steps_that_do(shrinker: Shrinker, steps: Steps) -> None:
    """A first cut for long inputs: the last K steps with the steps that define the
    names they use (K = 1, 2, 4, …), the first such slice that still does what the
    target says; a failure set up by a few late steps is cut out of a long trace in a
    few small runs instead of halving the whole."""
    size = 1
    while size * 2 <= len(steps) and not shrinker.out_of_time():
        kept = with_definers(steps, range(len(steps) - size, len(steps)))
        if len(kept) * 2 > len(steps):
            break
        if shrinker.attempt([steps[j] for j in kept]):
            return
        size *= 4


def shrunk_scenario(scenario: Scenario, outcome: ShrinkOutcome, target: Target, name: Optional[str] = None) -> Scenario:
    """The shrunk steps as a scenario of the input's config (its pools lowered)."""
    description = (f"Shrunk by urc shrink from {len(scenario.steps):,} steps of {scenario.path} "
                   f"({outcome.runs:,} candidates run): step {len(outcome.steps)} {target.describe()}, as step "
                   f"{target.step} of the input does.")
    meta = {"name": name or f"{scenario.name}-shrunk", "description": description,
            "source": f"urc shrink {scenario.path}"}
    header = {"schema": 1, "scenario": meta, "config": dict(outcome.config or scenario.config)}
    return scenario_from_records(header, runnable(outcome.steps), name=meta["name"])


def with_origins(toml_text: str, steps: Steps, source: str) -> str:
    """The written scenario with a comment above each step naming the input line it
    came from."""
    source = "".join(c if c.isprintable() else "?" for c in source)  # a comment stays one line
    out, k = [], 0
    for line in toml_text.split("\n"):
        if line == "[[step]]" and k < len(steps):
            origin = steps[k].get(ORIGIN)
            if origin is not None:
                out.append(f"# from {source}:{origin}")
            k += 1
        out.append(line)
    return "\n".join(out)
