"""The headless runner: builds the cache a scenario configures, runs its steps and
checks, after every step, the invariants, the match fingerprints and the step's
expectations. It produces a ``Timeline`` and can record a JSONL trace as it goes."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
from pathlib import Path
from typing import Any, Optional, TextIO

from cache import CacheError, EventKind, EventLog, UnifiedRadixCache, Violation, check_invariants, verify_match
from cache.checks.invariants import one_thread
from cache.observe.views import GlobalRecord
from cache.controller.snapshot import global_record, node_record

from cache.observe.kv_events import event_dict

from .. import ops
from ..scenarios.node_fields import is_node_field, observe_node_field
from ..scenarios.request_fields import REQUEST_STATE, observe_request_state
from ..scenarios.session_fields import is_session_field, observe_session_field
from ..scenarios.scenario import Scenario, ScenarioError, Step, cache_config
from ..scenarios.step import EXACT
from .driver import CacheDriver
from .step_hold import HOLD, raise_interrupt_behind
from .states import StateShape, StateStore, TimelineState, all_records
from .fmt import kv_event_text
from .kv_router import RouterView
from .state_fields import state_field  # (exported regression tests import it from here)
from .timeline import Failure, StepRecord, Timeline


def build_cache(scenario: Scenario, device: Optional[str] = None) -> UnifiedRadixCache:
    """The cache a scenario's [config] describes; a config that cannot be built is a
    ScenarioError pointing at the [config] table."""
    config = cache_config(scenario, device)
    try:
        return UnifiedRadixCache(config)
    except (ValueError, TypeError, RuntimeError, MemoryError) as exc:
        raise ScenarioError(f"config cannot be built: {exc}", scenario.path, scenario.config_line) from None


_loops = 0  # checked loops open now (nested ones leave the outermost in charge)
_settled = False  # a timeline was settled inside the open loop: it stays frozen


@contextlib.contextmanager
def checked_loop():
    """Around a loop of checked steps (``urc run``, the fuzzer, a whole ``Runner.run``):
    torch's small ops on one intra-op thread (``one_thread``), and the cyclic GC kept
    off everything that existed before the loop (torch, the modules, the scenario),
    frozen on entry and thawed on exit (unless ``settle`` ran inside: then everything
    stays frozen, as settling wants): the full collections a long loop triggers scan
    the loop's own objects only (README, "The timeline at scale"). Inside, the youngest
    generation is collected every ``YOUNG_COLLECTION`` allocations instead of 700: a
    step allocates a few dozen containers, and each young collection also counts toward
    the older ones."""
    global _loops, _settled
    _loops += 1
    if _loops == 1:
        gc.freeze()
        thresholds = gc.get_threshold()
        gc.set_threshold(max(thresholds[0], YOUNG_COLLECTION), *thresholds[1:])
    try:
        with one_thread():
            yield
    finally:
        _loops -= 1
        if _loops == 0:
            gc.set_threshold(*thresholds)
            if not _settled:
                gc.unfreeze()
            _settled = False


YOUNG_COLLECTION = 10_000  # allocations between young collections in a checked loop (measured: README)


KEEP_EVERY = 512  # steps between moving a run's records out of the collector's sight (inside its checked loop)
FULL_SWEEP_EVERY = 256  # steps between full invariant sweeps (chosen by measurement: README)


class Runner:
    """Runs one scenario step by step; ``step()`` lets a UI advance one step at a time.

    After each step it checks what the step touched (``check_invariants(touched=…)``),
    and every ``sweep_every`` steps, at the last step and with ``full_checks`` on every
    step, the whole tree — including that the timeline's state still equals the
    cache's (``timeline.drift``)."""

    def __init__(self, scenario: Scenario, record: Optional[TextIO] = None, checks: bool = True,
                 device: Optional[str] = None, full_checks: bool = False, sweep_every: int = FULL_SWEEP_EVERY,
                 refusals_ok: bool = False, sweep_at_end: bool = True, kv_events=None):
        self.scenario = scenario
        self.sweep_at_end = sweep_at_end  # off when steps keep arriving (the fuzzer): each is "the last"
        self.refusals_ok = refusals_ok  # the fuzzer: a refused op is an outcome, if it changed nothing
        self.cache = build_cache(scenario, device)
        self.driver = CacheDriver(self.cache)
        self.log = EventLog(self.cache.events)
        self.cache.tree.take_touched()  # start recording what each step changes
        # KV events ([config] enable_kv_cache_events, or a JSONL stream or a publisher to send them to): each step's
        # batch is replayed into a router's view, checked against the cache (kv_router.py)
        if kv_events is not None and not self.cache.tree.kv_events.enabled:
            self.cache.tree.kv_events.enable()
        self.kv_router = RouterView() if self.cache.tree.kv_events.enabled else None
        self.kv_out = kv_events
        if self.kv_router is not None:
            self._kv_events(0, "init")
        self.checks = checks
        self.full_checks = full_checks
        self.sweep_every = max(1, sweep_every)
        self.record = record
        store = StateStore(StateShape.of(self.cache), all_records(self.cache), global_record(self.cache))
        self.timeline = Timeline(scenario, store)
        self._next = 0
        if record is not None:
            _write_line(record, scenario.header())

    @property
    def done(self) -> bool:
        return self._next >= len(self.scenario.steps)

    def extend(self, scenario: Scenario) -> None:
        """Carry on with ``scenario``: the same steps plus more at the end (live ops,
        a followed trace); what already ran stays."""
        ran = self._next
        if len(scenario.steps) < ran or (ran and scenario.steps[ran - 1] is not self.scenario.steps[ran - 1]):
            raise ValueError("a runner can only be extended with steps after the ones it ran")
        self.scenario = self.timeline.scenario = scenario

    def run(self) -> Timeline:
        with checked_loop():
            while not self.done:
                self.step()
                if self._next % KEEP_EVERY == 0:  # what the run made so far is history now
                    gc.collect(1)
                    gc.freeze()
            settle(self.timeline)  # inside the loop: the collection skips what the loop froze
        return self.timeline

    def step(self) -> StepRecord:
        step = self.scenario.steps[self._next]
        self._next += 1
        return self.run_step(step, last=self.done)

    def run_step(self, step: Step, last: bool = False) -> StepRecord:
        """Run and check one step (``step()`` takes the scenario's next; a streamed trace
        hands them in itself, ``last`` on its final one, which gets the full sweep). An
        interrupt meanwhile is raised once the step is recorded (``step_hold``)."""
        with HOLD:
            return self._run_step(step, last)

    def _run_step(self, step: Step, last: bool) -> StepRecord:
        cache, store = self.cache, self.timeline.store
        result, error = None, None
        hits = dict(cache.fault_hits) if cache.fault_hits else None
        try:
            result = self.driver.run(step.op, step.fields, step.packed_tokens)
        except CacheError as exc:
            raise_interrupt_behind(exc)
            error = f"{type(exc).__name__}: {exc}"
        events = tuple(self.log.take())
        touched = touched_nodes(cache, events, store.current, cache.tree.take_touched())
        globals_ = global_record(cache)
        if globals_.lru_relabels != store.globals[-1].lru_relabels:
            touched |= set(cache.tree.nodes) | set(store.current)  # every label in a list moved
        delta = changed_records(cache, store, touched)
        full = self.full_checks or step.index % self.sweep_every == 0 or (self.sweep_at_end and last)
        violations: list[Violation] = []
        if self.checks:
            # a step whose events only took or dropped locks or moved LRU places (a lock, an
            # unlock, a plain match) changed no node's data: its content needs no re-read
            keeps_data = error is None and all(e.kind in _DATA_KEEPING for e in events)
            violations = check_invariants(cache) if full else check_invariants(
                cache, touched=touched, data_touched=() if keeps_data else None)
        match = self.driver.last_match
        if self.checks and match is not None:
            violations.extend(verify_match(cache, match.key, match.result))
        published: tuple[str, ...] = ()
        if self.kv_router is not None:
            found, published = self._kv_events(step.index, step.op)
            if self.checks:
                violations.extend(found)
        unchanged = not delta and _same_globals(globals_, store.globals[-1])
        store.append(delta, globals_)
        if self.checks and full:
            violations.extend(drift(cache, store))
        failures = self._judge(step, result, error, unchanged)
        fired = tuple(n for n, count in cache.fault_hits.items() if count != hits[n]) if hits else ()
        record = StepRecord(step, result, error, events, tuple(violations), tuple(failures), store, full, fired,
                            published)
        self.timeline.add(record)
        if self.record is not None:
            _write_line(self.record, step.raw)
        return record

    def _kv_events(self, index: int, op: str) -> tuple[list[Violation], tuple[str, ...]]:
        """Drain the step's KV events: written out, replayed, the view checked; the
        violations and the events in words."""
        batch = self.cache.tree.kv_events.take()
        if self.kv_out is not None:
            if hasattr(self.kv_out, "publish"):  # a publisher (kv_wire): one batch per step that has events
                if batch:
                    self.kv_out.publish(batch)
            else:
                for event in batch:
                    _write_line(self.kv_out, {"step": index, "op": op, **event_dict(event)})
        return self.kv_router.apply(batch) + self.kv_router.check(self.cache), tuple(map(kv_event_text, batch))

    def sweep(self) -> list[Violation]:
        """The full check now: every invariant over the whole tree, and the timeline's
        state against the cache's."""
        return check_invariants(self.cache) + drift(self.cache, self.timeline.store)

    def _judge(self, step: Step, result, error, unchanged: bool) -> list[Failure]:
        if step.expect_error is not None:
            if error is None:
                return [Failure("expect_error", step.expect_error, "the op succeeded")]
            failures = []
            if step.expect_error not in error:
                failures.append(Failure("expect_error", step.expect_error, error))
            if not unchanged and not _may_change_when_refused(step.op):
                failures.append(Failure("state", "unchanged by the failed op", "changed"))
            return failures
        if error is not None:
            if self.refusals_ok:
                return [] if unchanged or _may_change_when_refused(step.op) else [
                    Failure("state", "unchanged by the failed op", "changed")]
            return [Failure("error", None, error)]
        actual = self.observe(step.expect, result or {})
        return [Failure(k, v, actual[k]) for k, v in step.expect.items() if actual[k] != v]

    def observe(self, fields: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        """The actual value of each expected field."""
        store = self.timeline.store
        state = TimelineState(store.shape, store.current, store.globals[-1])  # a view of now, not a copy
        out: dict[str, Any] = {}
        exact = set(fields.get(EXACT, ()))
        for key, want in fields.items():
            if key == EXACT:
                out[key] = want  # read by the tables it names
            elif is_node_field(key, state.components):
                out[key] = observe_node_field(key, want, state, key in exact, self.driver.node_of)
            elif key == REQUEST_STATE:
                out[key] = observe_request_state(want, state, key in exact)
            elif is_session_field(key):
                out[key] = observe_session_field(key, want, state, self.cache, key in exact)
            elif key in result:
                out[key] = result[key]
            else:
                out[key] = state_field(state, key)
        return out


SETTLE_STEPS = 1000  # below this a full collection is too short to notice, and settling costs ~2.5 ms


def settle(timeline: Timeline) -> None:
    """A finished long timeline is immutable history: move it out of the collector's
    sight (``gc.freeze``), so reading it later never pays a full collection over every
    record kept (measured: 0.2 s pauses on a 10,000-node timeline, every ~10 TUI keys)."""
    global _settled
    if len(timeline) >= SETTLE_STEPS:
        gc.collect()  # inside a checked loop: only what the loop made (the rest is frozen)
        gc.freeze()
        _settled = _loops > 0


_DATA_KEEPING = frozenset({EventKind.LOCK, EventKind.UNLOCK, EventKind.PROMOTE, EventKind.VERDICT})


def touched_nodes(cache: UnifiedRadixCache, events, before: dict, recorded: set[int] = frozenset()) -> set[int]:
    """Nodes a step may have changed: every event's node, its ancestors (access times,
    hit counts, path locks, leaf flags) and, for a split, the new parent's child (it was
    re-parented and shortened). A node the step deleted is found in ``before`` (the
    previous state's records). ``recorded`` adds the ids the tree itself saw change
    (``tree.take_touched``), which names what no event does (an LRU move on a match)."""
    nodes = cache.tree.nodes
    splits = {e.node for e in events if e.kind is EventKind.SPLIT}
    out: set[int] = {cache.tree.root.id}  # a match that finds nothing still touches the root
    for node_id in {e.node for e in events if e.node is not None} | recorded:
        out.add(node_id)
        node = nodes.get(node_id)
        if node is None:  # deleted: its old parent (if still there) and that one's path changed
            old = before.get(node_id)
            parent = nodes.get(old.parent) if old is not None and old.parent is not None else None
        else:
            if node_id in splits:
                out.update(child.id for child in node.children.values())  # the split re-parented them
            parent = node.parent
        while parent is not None and parent.id not in out:
            out.add(parent.id)
            parent = parent.parent
    return out


def changed_records(cache: UnifiedRadixCache, store: StateStore, touched: set[int]):
    """The touched nodes whose record differs from the store's current one."""
    delta = {}
    current = store.current
    for node_id in touched:
        record = node_record(cache, node_id)
        if record != current.get(node_id):
            delta[node_id] = record
    return delta


def drift(cache: UnifiedRadixCache, store: StateStore) -> list[Violation]:
    """The full-sweep check of the timeline itself: its state equals the cache's."""
    live = all_records(cache)
    if live == store.current:
        return []
    missing = sorted(set(live) ^ set(store.current))
    stale = sorted(i for i in set(live) & set(store.current) if live[i] != store.current[i])
    return [Violation("timeline.drift", f"the timeline's state differs from the cache: nodes {(missing + stale)[:8]}"
                      " (a change no event reported)")]


def _same_globals(a: GlobalRecord, b: GlobalRecord) -> bool:
    return (a.pools == b.pools and a.requests == b.requests and a.sessions == b.sessions
            and a.streaming_sessions == b.streaming_sessions and a.storage == b.storage and a.metrics == b.metrics)


def same_state(a, b) -> bool:
    """Two snapshots equal but for the op counter."""
    return dataclasses.replace(a, op_seq=0) == dataclasses.replace(b, op_seq=0)


def _write_line(stream: TextIO, obj: Any) -> None:
    stream.write(json.dumps(obj, separators=(",", ":")) + "\n")
    stream.flush()


def run_scenario(scenario: Scenario | str | Path, record: Optional[str | Path] = None, checks: bool = True) -> Timeline:
    """Library entry point: load (if given a path), run, return the timeline."""
    from ..scenarios.scenario import load_scenario

    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    if record is None:
        return Runner(scenario, checks=checks).run()
    from ..scenarios.outputs import open_output

    # a library caller may replace its own file, but never an input, a link, a pipe or a device
    with open_output(str(record), [scenario.path], force=True, option="record", live=True) as stream:
        return Runner(scenario, record=stream, checks=checks).run()


def _may_change_when_refused(op: str) -> bool:
    """An op whose refusal changes state in SGLang too (its declaration says why)."""
    spec = ops.get(op)
    return spec is not None and bool(spec.refusal_changes)
