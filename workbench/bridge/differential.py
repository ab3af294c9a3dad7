"""``urc run --against sglang``: a scenario on our cache and on SGLang's, in lockstep.

After every step both sides' op results (or the fact that each refused) and their
states (``canonical.py``) are compared; the first difference stops the run and is
reported with both sides. What cannot be compared by design is listed once with the
reason and never counted: a component SGLang does not have, the fault catalogue
(ours puts back upstream bugs SGLang 0.5.23 has fixed), input ours refuses before
any cache call (SGLang does not check it), and, with the Rust tree core, the nodes.
The scenario's own ``expect`` fields are not checked here: SGLang is the reference.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from cache.basics.errors import (
    ForeignIndexError, InvalidKeyError, InvalidValueError, LockError, ReferenceAssertsError, UnknownNodeError,
)

from ..model.timeline.runner import build_cache
from ..model.scenarios.scenario import Scenario
from ..model.timeline.driver import CacheDriver, RunError
from ..model.timeline.step_hold import HOLD, raise_interrupt_behind
from cache.observe.kv_events import event_dict

from .canonical import Difference, first_difference, from_snapshot
from .sglang_env import BridgeError, check_version
from .sglang_side import SGLangSide
from .sglang_storage import unbridged_storage_field
from ..model.ops.spec import NODE_RESULTS, in_sglang

# what ours refuses that SGLang 0.5.23 does not check (sent to it, it would go on and
# change its state): error class -> why the step is not sent
REFUSED_BY_DESIGN = {
    (InvalidKeyError, InvalidValueError, ForeignIndexError, UnknownNodeError, RunError):
        "ours checks input before any cache call and changes nothing; SGLang does not check it",
    (LockError,): "ours checks every lock receipt (released twice, or on another node); SGLang checks only that"
                  " lock counts stay >= 0, so while another lock holds the node it would release that one",
}


ASSERTS = "SGLang asserts here (a server would crash)"


@dataclasses.dataclass(frozen=True)
class Divergence:
    step: int
    line: int
    op: str
    difference: Difference

    def as_dict(self) -> dict:
        return {"step": self.step, "line": self.line, "op": self.op, **self.difference.as_dict()}


@dataclasses.dataclass(frozen=True)
class ByDesign:
    what: str
    reason: str
    steps: tuple[int, ...] = ()  # the steps it concerns (none: the whole run)

    def as_dict(self) -> dict:
        return {"what": self.what, "reason": self.reason, "steps": list(self.steps)}


@dataclasses.dataclass
class DifferentialReport:
    path: str
    sglang_version: str
    core: str
    steps: int  # steps in the scenario
    run: int = 0  # steps run on both sides
    states_compared: int = 0
    nodes_compared: bool = True
    divergence: Optional[Divergence] = None
    by_design: list[ByDesign] = dataclasses.field(default_factory=list)
    skipped: Optional[str] = None  # the whole scenario cannot run on SGLang, and why
    stopped_at: Optional[int] = None  # the step where SGLang asserted (as ours said it would): not compared past it
    kv_event_steps: int = 0  # steps whose KV event batches were compared (events on)
    kv_events: int = 0  # events in them, each side

    @property
    def agrees(self) -> bool:
        return self.divergence is None

    def as_dict(self) -> dict:
        return {
            "file": self.path, "against": f"sglang {self.sglang_version}", "core": self.core, "steps": self.steps,
            "run": self.run, "states_compared": self.states_compared, "nodes_compared": self.nodes_compared,
            "agrees": self.agrees, "divergence": self.divergence.as_dict() if self.divergence else None,
            "by_design": [note.as_dict() for note in self.by_design], "skipped": self.skipped,
            "stopped_at": self.stopped_at, "kv_event_steps": self.kv_event_steps, "kv_events": self.kv_events,
        }


def run_against(scenario: Scenario, core: str = "python", allow_version: bool = False, every: int = 1,
                perturb=None, kv_events: bool = False) -> DifferentialReport:
    """Run ``scenario`` on both caches and stop at the first divergence. States are
    compared after every ``every`` steps and after the last. ``perturb(ours_driver,
    step_index)``, for tests: tamper with our side to prove a divergence is caught.
    ``kv_events`` (or the scenario's ``enable_kv_cache_events``): both sides record KV
    events, turned on once built, and each step's batches are compared event by event."""
    version = check_version(allow_version)
    report = DifferentialReport(scenario.path, version, core, len(scenario.steps))
    missing = [c for c in scenario.config["components"] if not in_sglang(c)]
    if missing:
        report.skipped = f"SGLang's unified cache has no {missing[0]!r} component"
        return report
    unbridged = unbridged_storage_field(scenario.config)
    if unbridged:  # delays are bridged (sglang_prefetch.py)
        report.skipped = (f"hicache.storage {unbridged} is not bridged yet (SGLang's failure injector is random: "
                          "only delay rules are bridged; its pages are another size than ours)")
        return report
    config = dict(scenario.config)
    if config.pop("faults", None):
        report.by_design.append(ByDesign(
            f"faults {', '.join(scenario.config['faults'])} left out",
            "each puts back an upstream bug SGLang 0.5.23 has fixed; ours runs the fixed code"))
    config.pop("device", None)  # SGLang's side runs on the CPU, and so does ours here
    kv_events = config.pop("enable_kv_cache_events", False) or kv_events  # on after building, on both sides
    ours = CacheDriver(build_cache(dataclasses.replace(scenario, config=config), "cpu"))
    theirs = SGLangSide.for_scenario(scenario, core, allow_version)
    try:
        return _lockstep(scenario, config, report, ours, theirs, every, perturb, kv_events)
    finally:  # the store directories go on every way out (an error, Ctrl-C)
        theirs.close()
        ours.cache.close()


def _lockstep(scenario: Scenario, config: dict, report: DifferentialReport, ours: CacheDriver, theirs: SGLangSide,
              every: int, perturb, kv_events: bool) -> DifferentialReport:
    """``run_against``'s steps on both sides, once both are built."""
    if kv_events and not hasattr(theirs.core, "kv_events"):
        report.by_design.append(ByDesign("KV events not compared", "this SGLang tree core records none"))
        kv_events = False
    if kv_events:
        ours.cache.tree.kv_events.enable()
        theirs.core.kv_events.enabled = True
    report.nodes_compared = theirs.inspectable
    if not theirs.inspectable:
        report.by_design.append(ByDesign("nodes, evictable leaves, LRU lists and node depths not compared",
                                         "SGLang's Rust tree core has no node inspection; other op results and pools"
                                         " are"))
    components = list(config["components"])
    refused: dict[str, list[int]] = {}
    asserted: list[int] = []  # steps where SGLang asserted as ours said it would
    compared_last = True
    for step in scenario.steps:
        with HOLD:  # an interrupt waits for both sides' step (step_hold)
            mine, my_error = _attempt(ours.run, step.op, step.fields)
            why = next((why for kinds, why in REFUSED_BY_DESIGN.items() if isinstance(my_error, kinds)), None)
            if why is not None:
                refused.setdefault(why, []).append(step.index)
                continue
            if perturb is not None:
                perturb(ours, step.index)
            theirs_result, their_error = _attempt(theirs.run, step.op, step.fields)
            if isinstance(their_error, BridgeError):
                raise their_error
            report.run += 1
            if my_error is not None and isinstance(their_error, AssertionError):
                # a server would crash here; while SGLang's state is still ours the run goes on
                asserted.append(step.index)
                difference, compared_last = _compare_states(ours, theirs, components, report), True
                if difference is None:
                    continue
                if isinstance(my_error, ReferenceAssertsError):  # SGLang asserts mid-change: not compared past it
                    report.stopped_at = step.index
                    break
                report.divergence = Divergence(step.index, step.line, step.op, difference)
                break
            difference = _compare_results(mine, my_error, theirs_result, their_error,
                                          () if theirs.inspectable else NODE_RESULTS)
            if difference is None and kv_events:
                difference = _compare_kv_events(ours, theirs, report)
            compared_last = False
            if difference is None and (step.index % every == 0 or step.index == len(scenario.steps)):
                difference, compared_last = _compare_states(ours, theirs, components, report), True
            if difference is not None:
                report.divergence = Divergence(step.index, step.line, step.op, difference)
                break
    else:
        if not compared_last:  # the last steps were refused by design: the final state still counts
            difference = _compare_states(ours, theirs, components, report)
            if difference is not None:
                last = scenario.steps[-1]
                report.divergence = Divergence(last.index, last.line, last.op, difference)
    for why, steps in refused.items():
        report.by_design.append(ByDesign("steps ours refuses were not sent to SGLang", why, tuple(steps)))
    if asserted:
        report.by_design.append(ByDesign(
            ASSERTS, "ours refuses (ReferenceAssertsError), keeping only what SGLang did before its assert (a "
            "request's match, a checkpoint's insert); where SGLang's state after its assert still equals ours the run goes on" + (
                f", else it stops (step {report.stopped_at})" if report.stopped_at else ""), tuple(asserted)))
    return report


def _compare_states(ours: CacheDriver, theirs: SGLangSide, components: list[str], report: DifferentialReport):
    report.states_compared += 1
    mine, sglang = from_snapshot(ours.cache.snapshot(), components), theirs.state()
    stored = theirs.host is not None and theirs.host.storage is not None
    difference = first_difference(mine, sglang)
    if difference is None and stored:  # sglang_storage.py
        difference = theirs.host.storage.difference(ours.cache, theirs.sg.ComponentType.FULL)
    return difference


def _attempt(run, op: str, fields: dict) -> tuple[Optional[dict], Optional[BaseException]]:
    try:
        return run(op, fields), None
    except BridgeError:
        raise
    except Exception as exc:  # ours: CacheError; SGLang's refusals are asserts and ValueErrors
        raise_interrupt_behind(exc)  # a clean-up's error for a Ctrl-C is no refusal
        return None, exc


def _compare_results(mine: Optional[dict], my_error, theirs: Optional[dict], their_error,
                     unread=()) -> Optional[Difference]:
    """The first result that differs, leaving out those the other side cannot read (``unread``)."""
    if (my_error is None) != (their_error is None):
        return Difference("refused", _error_text(my_error), _error_text(their_error),
                          "one side refused the step, the other ran it")
    if my_error is not None:
        return None  # both refused: messages differ by design, the fact agrees
    mine, theirs = mine or {}, theirs or {}
    for key in sorted((set(mine) | set(theirs)) - set(unread)):
        if mine.get(key) != theirs.get(key):
            return Difference(f"result.{key}", mine.get(key), theirs.get(key))
    return None


def _compare_kv_events(ours: CacheDriver, theirs: SGLangSide, report: DifferentialReport) -> Optional[Difference]:
    """This step's KV events on both sides, event by event: type, block ids, parent,
    tokens, medium and how they coalesced."""
    mine = [event_dict(e) for e in ours.cache.tree.kv_events.take()]
    their = [_sglang_event(e) for e in theirs.core.kv_events.take()]
    report.kv_event_steps += 1
    report.kv_events += len(mine)
    for i in range(max(len(mine), len(their))):
        a, b = (mine[i] if i < len(mine) else None), (their[i] if i < len(their) else None)
        if a != b:
            return Difference(f"kv_events[{i}]", a, b, f"ours recorded {len(mine)} KV event(s), SGLang {len(their)}")
    return None


def _sglang_event(event) -> dict:
    """One of SGLang's KV events in ``event_dict``'s form."""
    out = {"type": type(event).__name__}
    for name in event.__struct_fields__:
        value = getattr(event, name)
        out[name] = getattr(value, "value", value) if name == "medium" else (
            list(value) if isinstance(value, (list, tuple)) else value)
    return out


def _error_text(error: Optional[BaseException]) -> str:
    if error is None:
        return "ran"
    first = (str(error).splitlines() or [""])[0][:200]
    return f"refused: {type(error).__name__}: {first}"


def summary_line(report: DifferentialReport) -> str:
    side = f"SGLang {report.sglang_version} ({report.core} tree core)"
    if report.skipped:
        return f"{report.path}: not run against {side}: {report.skipped}"
    if report.divergence is None:
        stop = f", stopped at step {report.stopped_at} where SGLang asserts" if report.stopped_at else ""
        return (f"{report.path}: agrees with {side}: {report.run} step(s) run on both, "
                f"{report.states_compared} state(s) compared{stop}")
    d = report.divergence
    return f"{report.path}:{d.line}: step {d.step} ({d.op}) diverges from {side}: {d.difference.field}"


def detail_lines(report: DifferentialReport) -> list[str]:
    lines = []
    if report.divergence is not None:
        diff = report.divergence.difference
        if diff.where:
            lines.append(f"  at      {diff.where}")
        lines.append(f"  ours    {_value(diff.ours)}")
        lines.append(f"  SGLang  {_value(diff.theirs)}")
    for note in report.by_design:
        steps = f" (steps {_ranges(note.steps)})" if note.steps else ""
        lines.append(f"  by design: {note.what}{steps}: {note.reason}")
    return lines


def _value(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 300 else text[:297] + "..."


def _ranges(steps: tuple[int, ...]) -> str:
    return ", ".join(map(str, steps[:12])) + (f", … ({len(steps)} in all)" if len(steps) > 12 else "")
