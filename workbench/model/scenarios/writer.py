"""Scenario files written back: a live session saved from the TUI, a fuzzer's shrunk
repro, a test export. TOML for people to read and edit, JSONL for traces; both load
with ``load_scenario`` into the same steps they were written from."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .scenario import SCHEMA, Scenario, Step

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_value(value: Any) -> str:
    """One value as TOML: the types a scenario holds (str, int, bool, lists, tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"a scenario holds no {type(value).__name__} values")


def toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def _table(lines: list[str], title: str, fields: Mapping[str, Any]) -> None:
    lines.append(f"[{title}]")
    lines.extend(f"{toml_key(k)} = {toml_value(v)}" for k, v in fields.items())
    lines.append("")


def scenario_toml(scenario: Scenario, steps: Iterable[Step] | None = None) -> str:
    """The scenario (or its first steps) as a TOML file; each step as written."""
    lines = [f"schema = {SCHEMA}", ""]
    _table(lines, "scenario", scenario.meta)
    _table(lines, "config", scenario.config)
    for step in scenario.steps if steps is None else steps:
        _table(lines, "[step]", _ordered(step.raw))
    return "\n".join(lines)


def scenario_jsonl(scenario: Scenario, steps: Iterable[Step] | None = None) -> str:
    """The scenario as a schema-1 JSONL trace (what ``urc run --record`` writes)."""
    out = [json.dumps(scenario.header(), separators=(",", ":"))]
    out.extend(json.dumps(step.raw, separators=(",", ":")) for step in (scenario.steps if steps is None else steps))
    return "\n".join(out) + "\n"


def _ordered(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``op`` first and ``expect`` last, so a step reads as a call and then its check.
    A description goes in front of everything, as a comment would."""
    head = [k for k in ("description", "op") if k in raw]
    tail = [k for k in ("expect", "expect_error") if k in raw]
    middle = [k for k in raw if k not in head and k not in tail]
    return {k: raw[k] for k in head + middle + tail}
