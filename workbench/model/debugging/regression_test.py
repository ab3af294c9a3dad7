"""Export a timeline up to a step as a self-contained pytest file (the TUI's ``t`` key).

What you are looking at becomes a regression test in one key press: the scenario's
first steps, each pinned to the results it had, and the state after the last one
(every counter and the tree's shape). The test runs the workbench's own runner, so it
fails — naming the step and field — as soon as the cache behaves differently.

A run that departs from its scenario (a failed check, an unexpected error, a broken
invariant) is a bug found, not a behaviour to keep: pinned, its test passes on the bug.
``keep_expectations`` writes the other test: the scenario's steps as written, which
fails, naming the step and field, until the cache does what the scenario expects.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Optional

from ..scenarios.outputs import open_output
from ..timeline.runner import state_field
from ..ops import DETAIL_RESULTS, OPS, host_parts, owner as ops_owner
from ..scenarios.fields import STATE_FIELDS
from ..scenarios.node_fields import EVICTED_MATCH
from ..scenarios.scenario import Scenario, ScenarioError, Step, scenario_from_records
from ..scenarios.writer import scenario_toml
from ..timeline.states import TimelineState
from ..timeline.timeline import StepRecord, Timeline

try:  # the same parser the loader uses
    import tomli as tomllib
except ImportError:  # pragma: no cover
    import tomllib

SCENARIO_FILE = "scenario.toml"  # the name the test writes its scenario to, in tmp_path


def write_regression_test(timeline: Timeline, upto: int, path: str | Path, force: bool = False,
                          keep_expectations: bool = False) -> str:
    """Write ``regression_test_source(timeline, upto, keep_expectations)`` to ``path``; refuses
    an existing file without ``force`` and a missing or unwritable directory (``ScenarioError``,
    as every output the workbench writes). Returns the source written."""
    source = regression_test_source(timeline, upto, keep_expectations)  # built first: a failed export leaves no file
    inputs = [timeline.scenario.path] if timeline.scenario.path else []
    with open_output(str(path), inputs, force, option="export to") as stream:
        stream.write(source)
    return source


def departures(timeline: Timeline, upto: int) -> list[str]:
    """Where the first ``upto`` steps did not do what their scenario expects, one line
    each (``step 2 (match): prefix_len: expected 3, got 4``); empty when they all did."""
    return [line for record in timeline.records[:upto] for line in _departures_of(record)]


def _departures_of(record: StepRecord) -> list[str]:
    where = f"step {record.index} ({record.step.op})"
    lines = [f"{where}: {failure}" for failure in record.failures]
    if record.violations:
        lines.append(f"{where}: broke invariants ({', '.join(v.name for v in record.violations)})")
    return lines


def regression_test_source(timeline: Timeline, upto: int, keep_expectations: bool = False) -> str:
    """The text of a pytest file that replays the first ``upto`` steps and checks
    every step's results and the final state as this timeline recorded them; with
    ``keep_expectations``, the steps as the scenario wrote them, checked against its own
    expectations only (no state pinned: today's is the one a departure left)."""
    if not 0 <= upto <= len(timeline.records):
        raise ValueError(f"step {upto} is not in the timeline (0..{len(timeline.records)} have run)")
    if keep_expectations:
        return _kept_source(timeline, upto)
    scenario = timeline.scenario
    components = scenario.config["components"]
    pinned = [pin_step(record, components) for record in timeline.records[:upto]]
    steps = [step for step, _ in pinned]
    toml = _commented(scenario_toml(scenario, steps), [notes for _, notes in pinned])
    _check_loads(toml, scenario)
    state = timeline.state_after(upto)
    fields = state_fields(components)
    expected_state = {name: state_field(state, name) for name in fields}
    parts = [
        _docstring(scenario, upto, pinned),
        "from workbench.model.timeline.runner import run_scenario, state_field",
        "",
        f"SCENARIO_TOML = {_string_literal(toml)}",
        "",
        f"# The state after step {upto}: every counter this config has.",
        "EXPECTED_STATE = " + _dict_literal(expected_state),
        "",
        f"# The tree after step {upto}, depth first (children by namespace and first page):",
        "# (depth, key tokens, {component: (value_len, lock_ref)}); value_len None is a tombstone.",
        "EXPECTED_TREE = " + _tree_literal(tree_shape(state)),
        "",
        "",
        _TREE_SHAPE_SOURCE,
        "",
        "",
        _test_function(regression_test_name(scenario.name), upto),
    ]
    return "\n".join(parts)


def _kept_source(timeline: Timeline, upto: int) -> str:
    scenario = timeline.scenario
    records = timeline.records[:upto]
    notes = [[f"fails until fixed: {line}" for line in _departures_of(record)] for record in records]
    toml = _commented(scenario_toml(scenario, [record.step for record in records]), notes)
    _check_loads(toml, scenario)
    lines = [
        f"Regression test for scenario {scenario.name!r}: its first {upto} of {len(scenario.steps)} steps, as written.",
        "",
        f"Exported from the timeline of {scenario.path or 'a live session'} at step {upto} (the TUI's `t` key,",
        "workbench.model.debugging.regression_test), keeping the scenario's own expectations: it fails until",
        "the cache does what the scenario expects. At export time:",
        *[f"- {line}" for line in departures(timeline, upto)],
    ]
    return "\n".join([
        _docstring_literal(lines),
        "from workbench.model.timeline.runner import run_scenario",
        "",
        f"SCENARIO_TOML = {_string_literal(toml)}",
        "",
        "",
        _test_function(regression_test_name(scenario.name), upto, pinned=False),
    ])


def state_fields(components: list[str]) -> list[str]:
    """The state fields a config has (``swa_*`` only with the swa component, …)."""
    return [name for name in STATE_FIELDS if ops_owner(name) in (*components, None)]


def tree_shape(state: TimelineState) -> list[tuple[int, int, dict[str, tuple[Optional[int], int]]]]:
    """Each node depth first: (depth, key tokens, {component: (value_len, lock_ref)}).
    The same code is written into the exported test, so both sides compute it alike."""
    depth: dict[int, int] = {}
    shape = []
    for node in state.nodes:
        depth[node.id] = 0 if node.parent is None else depth[node.parent] + 1
        components = {name: (view.value_len, view.lock_ref) for name, view in node.components.items()}
        shape.append((depth[node.id], len(node.key), components))
    return shape


_TREE_SHAPE_SOURCE = '''def tree_shape(state):
    """Each node depth first: (depth, key tokens, {component: (value_len, lock_ref)})."""
    depth = {}
    shape = []
    for node in state.nodes:
        depth[node.id] = 0 if node.parent is None else depth[node.parent] + 1
        components = {name: (view.value_len, view.lock_ref) for name, view in node.components.items()}
        shape.append((depth[node.id], len(node.key), components))
    return shape'''


def regression_test_name(scenario_name: str) -> str:
    """``test_`` and the scenario's name as an identifier (``tour-swa`` -> ``test_tour_swa``)."""
    slug = re.sub(r"[^0-9A-Za-z]+", "_", scenario_name).strip("_").lower()
    return f"test_{slug or 'scenario'}"


# ---- pinning each step to what it did ----------------------------------------------------


def pin_step(record: StepRecord, components: list[str]) -> tuple[Step, list[str]]:
    """The step with an ``expect`` of its actual results merged with what it already
    expected, and notes on every place the export departs from the scenario as written
    (those pin today's behaviour, which the scenario did not expect)."""
    step, raw, notes = record.step, dict(record.step.raw), []
    where = f"step {step.index} ({step.op})"
    if record.error is not None:
        if step.expect_error is None:
            raw.pop("expect", None)
            raw["expect_error"] = record.error
            notes.append(f"{where} failed with an error the scenario did not expect; pinned as expect_error")
        elif step.expect_error not in record.error:
            raw["expect_error"] = record.error
            notes.append(f"{where} failed with another error than the expected {step.expect_error!r}; pinned")
        if any(f.field == "state" for f in record.failures):
            notes.append(f"{where} changed the state although it failed: the test fails on it until that is fixed")
    else:
        if step.expect_error is not None:
            raw.pop("expect_error")
            notes.append(f"{where} expected the error {step.expect_error!r} but succeeded; pinned to its results")
        expect = {**actual_results(step.op, record.result or {}, components), **step.expect}
        for failure in record.failures:
            if failure.field in expect:
                notes.append(f"{where} expected {failure.field} = {failure.expected!r} but got {failure.actual!r}; pinned")
                if _pinnable(failure.actual):
                    expect[failure.field] = failure.actual
                else:
                    del expect[failure.field]
        for field in [k for k, v in expect.items() if v is None]:  # a JSONL null; TOML has none
            notes.append(f"{where} expected {field} = null, which TOML cannot write; left out")
            del expect[field]
        if expect:
            raw["expect"] = expect
        else:
            raw.pop("expect", None)
    if record.violations:
        notes.append(f"{where} broke invariants ({', '.join(v.name for v in record.violations)}): "
                     "the test fails on them until they are fixed")
    return dataclasses.replace(step, raw=raw, expect=raw.get("expect", {}), expect_error=raw.get("expect_error")), notes


def actual_results(op: str, result: dict[str, Any], components: list[str]) -> dict[str, Any]:
    """The op's result fields that a step may expect: None is left out (TOML has no
    null), and so is what a component the config lacks reports (``mamba_evicted = 0``)
    and what the pinned tree says already (``DETAIL_RESULTS``: a node's depth)."""
    results = OPS[op].results_for(components, host_parts(components))
    return {
        key: value for key, value in result.items()
        if key in results and value is not None and key not in DETAIL_RESULTS
        and (ops_owner(key) is None or ops_owner(key) in components)
    }


def _pinnable(value: Any) -> bool:
    """Whether the actual value reads back as an expectation: a count, or a table or
    list as the state fields give them, unless a named match's node was evicted."""
    if isinstance(value, dict):
        return all(map(_pinnable, value.values()))
    if isinstance(value, list):
        return all(map(_pinnable, value))
    return value != EVICTED_MATCH and value is not None


def _check_loads(toml: str, scenario: Scenario) -> None:
    """The exported steps must load: a pinned expectation the loader refuses is a bug here,
    better reported now than as a broken test file."""
    doc = tomllib.loads(toml)
    header = {"schema": doc["schema"], "scenario": doc["scenario"], "config": doc["config"]}
    try:
        scenario_from_records(header, doc.get("step", []), name=f"export of {scenario.path or scenario.name}")
    except ScenarioError as exc:
        raise ScenarioError(f"cannot export this timeline as a test: {exc}") from None


def _commented(toml: str, notes: list[list[str]]) -> str:
    """Put each step's notes as TOML comments above its ``[[step]]`` line."""
    if not any(notes):
        return toml
    lines, out, step = toml.split("\n"), [], 0
    for line in lines:
        if line == "[[step]]":
            out.extend(f"# {note}" for note in notes[step])
            step += 1
        out.append(line)
    return "\n".join(out)


# ---- Python source --------------------------------------------------------------------------


def _docstring(scenario: Scenario, upto: int, pinned: list[tuple[Step, list[str]]]) -> str:
    source = scenario.path or "a live session"
    lines = [
        f"Regression test for scenario {scenario.name!r}: its first {upto} of {len(scenario.steps)} steps.",
        "",
        f"Exported from the timeline of {source} at step {upto} (the TUI's `t` key,",
        "workbench.model.debugging.regression_test). Every step expects the results it had then; the test",
        "also checks the state after the last step: every counter and the tree's shape.",
    ]
    notes = [note for _, step_notes in pinned for note in step_notes]
    if notes:
        lines += ["", "Pinned to the behaviour at export time, which the scenario did not expect:"]
        lines += [f"- {note}" for note in notes]
    return _docstring_literal(lines)


def _docstring_literal(lines: list[str]) -> str:
    text = "\n".join(lines).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return f'"""{text}\n"""\n'


def _string_literal(text: str) -> str:
    """A readable literal for the TOML: raw and triple-quoted when that can hold it."""
    for quote in ("'''", '"""'):
        if quote not in text and not text.endswith("\\") and quote[0] != text[-1:]:
            return f"r{quote}{text}{quote}"
    return repr(text)


def _dict_literal(fields: dict[str, Any]) -> str:
    return "{\n" + "".join(f"    {key!r}: {value!r},\n" for key, value in fields.items()) + "}"


def _tree_literal(shape: list) -> str:
    if not shape:
        return "[]"
    return "[\n" + "".join(f"    {row!r},\n" for row in shape) + "]"


def _test_function(name: str, upto: int, pinned: bool = True) -> str:
    """The test: replay, every step's checks and invariants, then (pinned) the final state."""
    verdict = "the cache no longer behaves as exported" if pinned else "the cache still departs from the scenario"
    source = f'''def {name}(tmp_path):
    path = tmp_path / {SCENARIO_FILE!r}
    path.write_text(SCENARIO_TOML, encoding="utf-8")
    timeline = run_scenario(path)
    assert len(timeline) == {upto}
    problems = [
        f"step {{record.index}} ({{record.step.op}}): {{failure.field}}: expected {{failure.expected!r}}, got {{failure.actual!r}}"
        for record in timeline.records
        for failure in record.failures
    ] + [
        f"step {{record.index}} ({{record.step.op}}): invariant {{violation}}"
        for record in timeline.records
        for violation in record.violations
    ]
    assert timeline.passed, "{verdict}:\\n" + "\\n".join(problems)
'''
    if not pinned:
        return source
    return source + '''    final = timeline.final
    assert {field: state_field(final, field) for field in EXPECTED_STATE} == EXPECTED_STATE
    assert tree_shape(final) == EXPECTED_TREE
'''
