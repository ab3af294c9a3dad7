"""``urc fuzz``: random op sequences against the cache, checked after every step, and a
failure shrunk to a minimal scenario file. The steps come from ``generator``'s
``OpGenerator``, deterministic for a seed.

Checking: every step gets the runner's invariants and KV fingerprints. With faults on
(``config.faults``) the same steps also run on a fault-free cache in lockstep, and each
step carries that cache's results and pool counters as expectations — the
differential check that catches a fault which keeps every invariant (a lock on the
wrong node, a shorter match). Those expectations come from the unfaulted cache, so a
written scenario passes with ``faults = []`` by construction and fails with the fault.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Optional

from ..timeline.runner import Runner, checked_loop, state_field
from ..scenarios.scenario import Scenario, ScenarioError, StepAppender, scenario_from_records
from .config import FuzzConfig  # noqa: F401  (re-exported: what a fuzz run is set up with)
from .generator import OpGenerator
from .shrink import Shrinker, Steps, pressure_steps
from .sweep import configs_for, sweep_configs
from ..timeline.timeline import StepRecord
from ..ops.spec import BASE

SANITY_PREFIXES = ("counter.", "lru.")  # what upstream's sanity check looks at: counters and LRU order
SANITY_SUFFIXES = (".balance",)  # … and its idle memory check: available + cached + held == total


# ---- checking ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Finding:
    """What failed first: the check's kind and name, at which step, and its message."""

    kind: str  # "invariant", "fingerprint", "expectation", "error"
    name: str  # the invariant's name, the expectation's field, or "error"
    step: int
    message: str

    @property
    def check(self) -> str:
        return f"{self.kind} {self.name}"

    def same_way(self, other: Optional[Finding]) -> bool:
        return other is not None and (self.kind, self.name) == (other.kind, other.name)


def findings(record: StepRecord) -> list[Finding]:
    """Every failed check of a step, invariants and fingerprints first."""
    out = [Finding("fingerprint" if v.name.startswith("match.") else "invariant", v.name, record.index, v.message)
           for v in record.violations]
    for failure in record.failures:
        kind = "error" if failure.field == "error" else "expectation"
        out.append(Finding(kind, failure.field, record.index, str(failure)))
    return out


def sanity_check_would_catch(record: StepRecord) -> bool:
    """Would a counters-and-LRU check (upstream's sanity and idle memory checks) see it?"""
    return any(v.name.startswith(SANITY_PREFIXES) or v.name.endswith(SANITY_SUFFIXES) for v in record.violations)


def pinned(record: StepRecord, components: tuple[str, ...], cache=None) -> dict[str, Any]:
    """The expectations a step gets from the fault-free cache: its error, or its results
    and the pool counters, node and tombstone counts after it (with ``cache``, a
    session run's, also its open sessions and tombstones)."""
    if record.error is not None:
        return {"expect_error": record.error.split(": ", 1)[-1]}
    expect = {k: v for k, v in (record.result or {}).items() if v is not None}
    state = record.state
    for c in components:
        for counter in ("available", "evictable", "protected", "held"):
            expect[f"{c}_{counter}"] = state_field(state, f"{c}_{counter}")
        if c != BASE:
            expect[f"{c}_tombstones"] = state_field(state, f"{c}_tombstones")
        expect[f"{c}_lru"] = state_field(state, f"{c}_lru")  # the order eviction will follow
    expect["nodes"] = state_field(state, "nodes")
    expect["requests"] = state_field(state, "requests")
    if cache is not None:
        from ..scenarios.session_fields import session_state

        expect.update(session_state(cache))
    return {"expect": expect}


class LockstepRun:
    """Steps appended one at a time; with faults, a fault-free twin pins expectations."""

    def __init__(self, config: FuzzConfig, name: str = "fuzz", checks: bool = True, full_checks: bool = False) -> None:
        self.config = config
        header = {"schema": 1, "scenario": {"name": name, "source": "urc fuzz"}, "config": config.scenario_config()}
        self.runner, self.appender = _empty_runner(header, checks, refusals_ok=not config.faults, full=full_checks)
        self.twin = None
        if config.faults:  # the twin's refusals become the faulty run's expect_error
            twin_header = {**header, "config": config.scenario_config(faults=())}
            self.twin = _empty_runner(twin_header, checks=False, refusals_ok=True, full=False)
        self.steps: Steps = []  # the steps as run, expectations included
        self.raw_steps: Steps = []  # the steps as generated (what the shrinker works on)

    def step(self, raw: dict[str, Any]) -> StepRecord:
        """Run ``raw`` (ScenarioError when the loader would refuse it). A generated step
        may carry ``expect_error = ""``: an op meant to be refused (a second unlock),
        which the loader accepts only so marked. Without a twin a refused op is an
        outcome (it must change nothing); the step is kept with the error it got, as
        ``expect_error``, so a written scenario replays it."""
        self.raw_steps.append(raw)
        if self.twin is not None:
            runner, appender = self.twin
            appender.append(raw)
            runner.extend(appender.scenario)
            op_only = {k: v for k, v in raw.items() if k not in ("expect", "expect_error")}
            raw = {**op_only, **pinned(runner.step(), self.config.components,
                                            runner.cache if self.config.sessions else None)}
        self.appender.append(raw)
        self.runner.extend(self.appender.scenario)
        record = self.runner.step()
        if self.twin is None and record.error is not None:
            raw = {**raw, "expect_error": record.error.split(": ", 1)[-1]}
        self.steps.append(raw)
        return record

    @property
    def records(self) -> list[StepRecord]:
        return self.runner.timeline.records


def _empty_runner(header: dict, checks: bool, refusals_ok: bool, full: bool) -> tuple[Runner, StepAppender]:
    """Incremental checks per step and a full sweep every 256 (the runner's rule);
    ``full``: the full sweep after every step."""
    scenario = scenario_from_records(header, [])
    runner = Runner(scenario, checks=checks, refusals_ok=refusals_ok, full_checks=full, sweep_at_end=False)
    return runner, StepAppender(scenario)


# ---- fuzzing -------------------------------------------------------------------------------------


EPISODE_STEPS = 2000  # steps per fresh cache: the timeline stays small and starts vary


@dataclasses.dataclass
class FuzzResult:
    config: FuzzConfig
    seed: int
    steps_run: int
    seconds: float
    episode: int = 0  # the episode (fresh cache) the last steps ran in
    finding: Optional[Finding] = None
    first_fired: Optional[int] = None  # in that episode: the first step where a fault changed behaviour
    sanity_caught: bool = False  # a counters-and-LRU check would have flagged the run by then
    run_steps: Steps = dataclasses.field(default_factory=list)  # the episode as run, expectations included
    raw_steps: Steps = dataclasses.field(default_factory=list)  # the episode as generated
    shrunk: Optional[Steps] = None
    shrink_runs: int = 0

    @property
    def ops_per_second(self) -> float:
        return self.steps_run / self.seconds if self.seconds else 0.0


def episode_seed(seed: int, episode: int) -> str:
    """Episode 0 of seed 7 is ``"7:0"``: string seeds are stable across Python runs."""
    return f"{seed}:{episode}"


@checked_loop()
def fuzz(config: FuzzConfig, seed: int, steps: int, time_budget: Optional[float] = None,
         on_step: Optional[Callable[[int], None]] = None, checks: bool = True,
         episode_steps: int = EPISODE_STEPS, full_checks: bool = False,
         option_sets: Optional[list] = None) -> FuzzResult:
    """Run up to ``steps`` generated steps, in episodes of ``episode_steps`` on a fresh
    cache each; stop at the first failed check (or when ``time_budget`` runs out).
    ``option_sets`` (options.py rows): episode i runs with row i mod n's options, and
    the result carries the config of the episode it ended in."""
    start = time.monotonic()
    result = FuzzResult(config, seed, 0, 0.0)
    episode = 0
    while result.steps_run < steps and result.finding is None:
        budget = None if time_budget is None else time_budget - (time.monotonic() - start)
        if budget is not None and budget <= 0:
            break
        done = result.steps_run
        last = run_episode(episode_config(config, option_sets, episode), seed, episode,
                           min(episode_steps, steps - done), budget,
                           None if on_step is None else (lambda n: on_step(done + n)), checks, full_checks)
        last.steps_run += done
        result = last
        episode += 1
        if time_budget is not None and time.monotonic() - start > time_budget:
            break
    result.seconds = time.monotonic() - start
    return result


def episode_config(config: FuzzConfig, option_sets: Optional[list], episode: int) -> FuzzConfig:
    """With ``option_sets``, episode i runs with row i mod n's options."""
    if not option_sets:
        return config
    return config.with_options(dict(option_sets[episode % len(option_sets)].options))


@checked_loop()
def run_episode(config: FuzzConfig, seed: int, episode: int, steps: int, time_budget: Optional[float] = None,
                on_step: Optional[Callable[[int], None]] = None, checks: bool = True,
                full_checks: bool = False) -> FuzzResult:
    """One episode: ``steps`` generated steps on a fresh cache (the generator seeded by
    ``episode_seed(seed, episode)``, so an episode is the same wherever it runs),
    stopping at the first failed check or when ``time_budget`` runs out; the whole
    tree swept at its end."""
    start = time.monotonic()
    result = FuzzResult(config, seed, 0, 0.0, episode)
    run = LockstepRun(config, checks=checks, full_checks=full_checks)
    generator = OpGenerator(config, episode_seed(seed, episode))
    for _ in range(steps):
        record = run.step(step := generator.next_step())
        if record.error is not None:
            generator.refused(step, run.runner.driver.reqs.keys())
        result.steps_run += 1
        if record.faults_fired and result.first_fired is None:
            result.first_fired = record.index
        result.sanity_caught = result.sanity_caught or sanity_check_would_catch(record)
        if on_step is not None:
            on_step(result.steps_run)
        found = findings(record)
        if found:
            result.finding = found[0]
            break
        if time_budget is not None and time.monotonic() - start > time_budget:
            break
    if result.finding is None and checks and run.records:  # the episode's end: the whole tree
        swept = run.runner.sweep()
        if swept:
            result.finding = Finding("invariant", swept[0].name, len(run.records), swept[0].message)
    result.run_steps, result.raw_steps = run.steps, run.raw_steps
    result.seconds = time.monotonic() - start
    return result


def reproduce(config: FuzzConfig, steps: Steps) -> Optional[Finding]:
    """Run generated ``steps`` (a fault-free twin pinning expectations, as the fuzzer does);
    the first failed check, or None (also when the steps are not a valid scenario)."""
    run = LockstepRun(config)
    try:
        for raw in steps:
            found = findings(run.step(raw))
            if found:
                return found[0]
    except ScenarioError:
        return None
    return None


def shrink_result(result: FuzzResult, budget_s: Optional[float] = 60.0) -> FuzzResult:
    """Shrink a found failure to a minimal sequence that fails the same way."""
    target = result.finding
    assert target is not None, "nothing to shrink"
    steps = result.raw_steps[: target.step]
    config = result.config
    unfaulted = dataclasses.replace(config, faults=())

    def fails_the_same_way(s: Steps) -> bool:
        # … and only with the fault: a cut the generator would not make (a third turn after a
        # rejected one, say) can fail the fault-free cache too, and then the repro shows no fault
        return target.same_way(reproduce(config, s)) and (not config.faults or reproduce(unfaulted, s) is None)

    shrinker = Shrinker(fails_the_same_way, budget_s, config.page_size, pressure=pressure_steps(config.scenario_config()))
    result.shrunk = shrinker.shrink(steps)
    result.shrink_runs = shrinker.runs
    return result


def repro_scenario(result: FuzzResult, name: Optional[str] = None) -> Scenario:
    """The shrunk failure as a scenario: the fault in config.faults, and only the
    expectations its failure needs (all of them if trimming would lose it)."""
    config, steps = result.config, result.shrunk or result.raw_steps
    run = LockstepRun(config)
    for raw in steps:
        run.step(raw)
    pinned_steps = run.steps
    finding = reproduce(config, steps)
    trimmed = _trim(pinned_steps, finding)
    label = "+".join(config.faults) or "unfaulted"
    meta = {
        "name": name or f"fuzz-{label}-seed{result.seed}",
        "description": (f"Found by urc fuzz ({config.label()}, seed {result.seed}, episode {result.episode}) after "
                        f"{len(result.run_steps)} steps of a fresh cache and "
                        f"shrunk to {len(steps)}. With the fault on, step {finding.step if finding else '?'} fails "
                        f"{finding.check if finding else 'a check'}; with faults = [] every step passes. Expectations "
                        "come from the fault-free cache."),
        "source": "urc fuzz",
    }
    header = {"schema": 1, "scenario": meta, "config": config.scenario_config()}
    for candidate in (trimmed, pinned_steps):
        scenario = scenario_from_records(header, candidate)
        if finding is not None and finding.same_way(first_finding(scenario)):
            return scenario
    return scenario_from_records(header, pinned_steps)


def _trim(steps: Steps, finding: Optional[Finding]) -> Steps:
    """Keep expectations only where the failure needs them: the failing step's failed
    field (an expectation failure), and every expect_error (a step that must fail)."""
    out = []
    for i, step in enumerate(steps, 1):
        new = {k: v for k, v in step.items() if k != "expect"}
        if finding is not None and i == finding.step and finding.kind == "expectation" and "expect" in step:
            new["expect"] = {k: v for k, v in step["expect"].items() if k == finding.name}
        out.append(new)
    return out


def first_finding(scenario: Scenario) -> Optional[Finding]:
    """The first failed check of a scenario run as ``urc run`` runs it."""
    runner = Runner(scenario)
    while not runner.done:
        found = findings(runner.step())
        if found:
            return found[0]
    return None


# ---- the detection table -------------------------------------------------------------------------

@dataclasses.dataclass
class Detection:
    fault: str
    result: Optional[FuzzResult]  # the run that flagged it (None: not flagged within the budget)
    tried: int  # fuzz runs (config, seed) tried

    @property
    def flagged(self) -> bool:
        return self.result is not None and self.result.finding is not None

    @property
    def at_first_faulty_step(self) -> bool:
        return self.flagged and self.result.first_fired == self.result.finding.step

    def row(self) -> dict[str, Any]:
        r = self.result
        if not self.flagged:
            return {"fault": self.fault, "flagged": False, "runs": self.tried,
                    "first_faulty_step": r.first_fired if r else None}
        return {
            "fault": self.fault, "flagged": True, "config": r.config.label(), "seed": r.seed, "episode": r.episode,
            "first_faulty_step": r.first_fired, "flagged_step": r.finding.step, "check": r.finding.check,
            "shrunk_steps": len(r.shrunk) if r.shrunk is not None else None,
            "sanity_check_catches": r.sanity_caught, "runs": self.tried,
        }


def detect_fault(fault, shrink_budget: Optional[float] = 60.0) -> Detection:
    """``detect`` for a catalogue entry (``cache.faults.catalogue()``) over the configs
    ``urc fuzz --fault F`` sweeps: those its components, sessions, model options and
    storage tier need, then their tight- and roomy-pool twins."""
    return detect(fault.name, fault.components, shrink_budget=shrink_budget,
                  configs=[dataclasses.replace(c, faults=()) for c in sweep_configs((fault.name,))])


DETECT_EPISODE = 300  # short episodes: a fault found early in a fresh cache shrinks fast


def detect(fault: str, components: tuple[str, ...], seeds: int = 4, steps: int = 3000,
           shrink_budget: Optional[float] = 60.0, configs: Optional[list[FuzzConfig]] = None,
           sessions: bool = False, options: tuple = (), storage: Optional[str] = None,
           more_seeds: int = 16) -> Detection:
    """Fuzz with one fault on, config by config and seed by seed (``steps`` each, in
    short episodes), until a check flags it; then shrink. The first ``seeds`` seeds
    go through every config first; a fault none of them flags (one that needs a deep
    state) gets seeds up to ``more_seeds``. ``components``: what the fault needs;
    ``sessions``: it acts on sessions (searched on the session configs); ``storage``:
    it lives in the storage tier (the storage configs, that stop policy)."""
    tried = 0
    last = None
    configs = list(configs if configs is not None else configs_for(components, sessions, options, storage))
    for first, end in ((0, seeds), (seeds, max(seeds, more_seeds))):
        for config in configs:
            config = dataclasses.replace(config, faults=(fault,))
            for seed in range(first, end):
                tried += 1
                last = fuzz(config, seed, steps, episode_steps=DETECT_EPISODE)
                if last.finding is not None:
                    return Detection(fault, shrink_result(last, shrink_budget), tried)
    return Detection(fault, last, tried)
