"""Scenario files (schema 1): TOML by hand, JSON Lines for recordings.

A scenario is data, never code: ``tomllib``/``json`` read it and this module checks
its header and config before anything runs (``step`` checks each step), so a bad file
fails with one message that names the file, the line and the field. Both formats share
one step schema (a ``[[step]]`` table is one JSONL line).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any, Optional

try:  # the compiled parser reads a large key several times faster than the stdlib's
    import tomli as tomllib
except ImportError:  # pragma: no cover - tomli is a dependency; stdlib fallback
    import tomllib

from .. import ops
from .errors import ScenarioError, shown
from .fields import CONFIG_FIELDS, SCENARIO_FIELDS
from .names import GrowingSteps, Names
from .step import Step, check_step, component_field
from .bundled import resolve_name
from .storage_place import ignored_path_notice, placed
from .inputs import (DuplicateKeyError, TooLarge, check_stdin, loads_unique, read_bounded, read_regular,
                     toml_loads)
from ..ops.spec import BASE, windowed

SCHEMA = 1
MAX_FILE_BYTES = 1 << 30  # a parsed trace takes ~7x its file size in memory: 1 GiB stays within a 24 GiB machine
STDIN = "-"
STDIN_NAME = "<stdin>"


@dataclasses.dataclass(frozen=True)
class Scenario:
    path: str
    name: str
    description: str
    source: str
    config: dict[str, Any]
    steps: tuple[Step, ...]
    meta: dict[str, Any]  # the [scenario] table as written
    config_line: Optional[int] = None
    notices: tuple[str, ...] = ()  # one-line warnings for the user (e.g. a dropped truncated line)

    def header(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "scenario": dict(self.meta), "config": dict(self.config)}


def cache_config(scenario: Scenario, device: Optional[str] = None):
    """Validate a scenario's [config] as a ``CacheConfig`` (cheap: allocates nothing and
    imports no torch, so a bad config is reported at once)."""
    from cache.config.cache_config import CacheConfig

    cfg = dict(scenario.config)
    cfg["components"] = tuple(cfg["components"])
    cfg["faults"] = tuple(cfg.get("faults", ()))
    if device is not None:
        cfg["device"] = device
    try:
        built = placed(CacheConfig.of(**cfg))  # never the file's own storage path (storage_place.py)
    except (ValueError, TypeError) as exc:
        raise ScenarioError(f"config cannot be built: {exc}", scenario.path, scenario.config_line) from None
    if windowed(built.components) and built.sliding_window > built.swa_pool_size:
        # the cache itself runs such a pool (unit tests refuse requests with it), but in a
        # scenario it is a typo: every request past the pool's size would be refused
        raise ScenarioError(f"config cannot be built: sliding_window {built.sliding_window} is larger than the SWA "
                            f"pool (swa_kv_size {built.swa_pool_size}): the pool must hold one whole window",
                            scenario.path, scenario.config_line)
    return built


# ---- loading ----------------------------------------------------------------------------


def load_scenario(path: str | Path) -> Scenario:
    """Read and check a scenario; ``-`` reads standard input (JSONL when its first
    character is ``{``, TOML otherwise). A name that is no file but a bundled scenario's
    (``tour``, ``bugs/NAME``) opens that one (``bundled``). Only regular files are read,
    and never more than ``MAX_FILE_BYTES`` (``inputs``)."""
    if str(path) == STDIN:
        name = STDIN_NAME
        try:
            fd = sys.stdin.buffer.fileno()
            check_stdin(fd)
            data = read_bounded(fd, MAX_FILE_BYTES, close=False)
        except (OSError, ValueError) as exc:
            raise ScenarioError(f"cannot read standard input: {exc}", name) from None
        return _parse(data, name, None)
    path = Path(resolve_name(str(path)))
    name = str(path)
    if path.suffix not in (".toml", ".jsonl") and not path.exists():
        raise ScenarioError("no such file, nor a bundled scenario of that name (tour, bugs/NAME, fuzz/NAME, …)", name)
    if path.suffix not in (".toml", ".jsonl"):
        raise ScenarioError("scenario files end in .toml (hand-written) or .jsonl (recorded)", name)
    return _parse(read_regular(name, MAX_FILE_BYTES, "scenario file"), name, path.suffix)


def _parse(data: Optional[bytes], name: str, suffix: Optional[str]) -> Scenario:
    if data is None:
        raise ScenarioError(_too_large(), name)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"not UTF-8 text (byte {exc.start})", name) from None
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
    if not text.strip() and suffix != ".jsonl":  # (an empty JSONL file is told about its header line)
        if suffix is None:
            raise ScenarioError("nothing came on standard input: pipe a scenario (TOML) or a trace (JSONL) into it",
                                name)
        raise ScenarioError("empty file: a scenario starts with schema = 1", name, 1)
    if suffix is None:
        suffix = ".jsonl" if text.lstrip().startswith("{") else ".toml"
    return _load_jsonl(text, name) if suffix == ".jsonl" else _load_toml(text, name)


def _too_large() -> str:
    limit = f"{MAX_FILE_BYTES // 2**30} GiB" if MAX_FILE_BYTES >= 2**30 else f"{MAX_FILE_BYTES:,} bytes"
    return f"urc reads scenario files and traces up to {limit} (split the trace)"


def scenario_from_records(header: dict[str, Any], steps: list[dict[str, Any]], name: str = "<generated>") -> Scenario:
    """A scenario from plain records (a generator's, a fuzzer's), checked like a JSONL file."""
    lines = [json.dumps(header)] + [json.dumps(step) for step in steps]
    return _load_jsonl("\n".join(lines) + "\n", name)


def _load_toml(text: str, name: str) -> Scenario:
    try:
        doc = toml_loads(text, tomllib)  # (tomli where installed)
    except TooLarge as exc:
        raise ScenarioError(str(exc), name, exc.line) from None
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"at line (\d+)", str(exc))
        line = int(match.group(1)) if match else max(1, len(text.rstrip("\n").split("\n")))  # "at end of document"
        raise ScenarioError(f"malformed TOML: {exc}", name, line) from None
    except RecursionError:
        raise ScenarioError("a value is nested too deeply", name) from None
    lines = _TomlLines(text)
    unknown = set(doc) - {"schema", "scenario", "config", "step"}
    if unknown:
        key = sorted(unknown)[0]
        raise ScenarioError(f"unknown top-level key {shown(key)}", name, lines.top(key))
    _check_schema(doc.get("schema"), name, lines.top("schema"))
    steps = doc.get("step", [])
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise ScenarioError("steps must be [[step]] tables", name, lines.top("step"), "step")
    return _build(doc.get("scenario"), doc.get("config"), steps, name, lines.section, lines.step)


def _load_jsonl(text: str, name: str) -> Scenario:
    raw_lines = text.split("\n")
    records: list[tuple[int, Any]] = []
    notices: list[str] = []
    for lineno, raw in enumerate(raw_lines, 1):
        if not raw.strip() or raw.lstrip().startswith("#"):  # blank, or a comment (a recorder's note)
            continue
        try:
            records.append((lineno, parse_line(raw, name, lineno)))
        except json.JSONDecodeError as exc:
            last = all(not r.strip() for r in raw_lines[lineno:])
            if last and not text.endswith("\n") and lineno > 1:
                notices.append(f"{name}:{lineno}: dropped a truncated last line (an interrupted recording)")
                break
            raise ScenarioError(f"malformed JSON: {exc.msg} (column {exc.colno})", name, lineno) from None
    if not records:
        raise ScenarioError("empty file: line 1 must be the header {\"schema\": 1, \"scenario\": …, \"config\": …}", name, 1)
    head_line, head = records[0]
    check_header(head, name, head_line)
    step_lines = [ln for ln, _ in records[1:]]
    steps = [rec for _, rec in records[1:]]
    for ln, rec in records[1:]:
        if not isinstance(rec, dict):
            raise ScenarioError("each step line must be a JSON object", name, ln)
    scenario = _build(
        head.get("scenario"), head.get("config"), steps, name,
        lambda section, field=None: head_line,
        lambda i, field=None: step_lines[i],
    )
    return dataclasses.replace(scenario, notices=tuple(notices) + scenario.notices)


def parse_line(raw: str | bytes, name: str, lineno: int) -> Any:
    """One JSONL line as JSON; a repeated key or deep nesting is a ScenarioError at
    ``name:lineno``, malformed JSON stays ``json.JSONDecodeError`` (the caller decides
    whether it is a truncated last line)."""
    try:
        return loads_unique(raw)
    except DuplicateKeyError as exc:
        raise ScenarioError(f"key {shown(exc.key)} is given twice in one object", name, lineno, exc.key) from None
    except TooLarge as exc:
        raise ScenarioError(str(exc), name, lineno) from None
    except RecursionError:
        raise ScenarioError("a value is nested too deeply", name, lineno) from None


def check_header(head: Any, name: str, head_line: int) -> None:
    """A JSONL trace's header line: an object with a config, known keys, schema 1."""
    if not isinstance(head, dict) or "config" not in head:
        raise ScenarioError("line 1 must be the header {\"schema\": 1, \"scenario\": …, \"config\": …}", name, head_line)
    unknown = set(head) - {"schema", "scenario", "config"}
    if unknown:
        raise ScenarioError(f"unknown header key {shown(sorted(unknown)[0])}", name, head_line)
    _check_schema(head.get("schema"), name, head_line)


def _check_schema(value, name: str, line: Optional[int]) -> None:
    if value != SCHEMA:
        raise ScenarioError(f"schema must be {SCHEMA} (got {shown(value)})", name, line, "schema")


def _build(meta, config, steps: list, name: str, section_line, step_line) -> Scenario:
    if not isinstance(meta, dict):
        raise ScenarioError("a [scenario] table with a name is required", name, section_line("scenario"))
    for key, value in meta.items():
        want = SCENARIO_FIELDS.get(key)
        if want is None:
            raise ScenarioError(f"unknown [scenario] field {shown(key)}", name, section_line("scenario", key), key)
        if not isinstance(value, want):
            raise ScenarioError(f"must be a {want.__name__}", name, section_line("scenario", key), key)
    if not meta.get("name"):
        raise ScenarioError("[scenario] needs a name", name, section_line("scenario"), "name")
    config = _check_config(config, name, section_line)
    checked = []
    names = Names(config["components"], bool(config.get("hicache")), bool(config.get("session_radix_cache")))
    for i, raw in enumerate(steps):
        checked.append(check_step(i, raw, name, lambda field=None, i=i: step_line(i, field), config, names))
    notices = () if checked else (f"{name}: the scenario has no steps",)
    ignored = ignored_path_notice(config, name)
    notices += (ignored,) if ignored else ()
    return Scenario(
        name, meta["name"], meta.get("description", ""), meta.get("source", ""), config, tuple(checked), dict(meta),
        section_line("config"), notices,
    )


def _check_config(config, name: str, section_line) -> dict[str, Any]:
    if not isinstance(config, dict):
        raise ScenarioError("a [config] table is required", name, section_line("config"))
    comps = config.get("components")
    listed = comps if isinstance(comps, list) else []
    for key, value in config.items():
        want = CONFIG_FIELDS.get(key)
        line = section_line("config", key)
        if want is None and component_field(key, listed) is not None:
            continue  # a component's own field: its component checks it when the cache is built
        if want is None:
            from cache.config.reference import did_you_mean

            raise ScenarioError(f"unknown [config] field {shown(key)}{did_you_mean(key)}", name, line, key)
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise ScenarioError(f"must be {_article(want)}", name, line, key)
    for required in ("components", "kv_size"):
        if required not in config:
            raise ScenarioError(f"[config] needs {required}", name, section_line("config"), required)
    comps = config["components"]
    if not all(isinstance(c, str) for c in comps) or BASE not in comps:
        raise ScenarioError(f'must list component names and include "{BASE}"', name, section_line("config", "components"), "components")
    faults = config.get("faults", [])
    if not all(isinstance(f, str) for f in faults):
        raise ScenarioError("must list fault names (strings)", name, section_line("config", "faults"), "faults")
    if faults:
        from cache.faults import check_fault_names

        try:
            check_fault_names(faults, comps)
        except ValueError as exc:
            raise ScenarioError(str(exc), name, section_line("config", "faults"), "faults") from None
    return dict(config)


def _article(kind: type) -> str:
    return {int: "an int", str: "a string", bool: "a boolean (true/false)", list: "a list"}.get(kind, kind.__name__)


class StepAppender:
    """Checks steps added at the end of a loaded scenario (a live op typed in the TUI,
    a line appended to a followed trace, a fuzzer's next op) exactly as if they had
    been in the file: the same messages, and the names defined so far still apply. A
    refused step leaves the appender as it was. ``scenario`` is the scenario with every
    appended step; its steps are a view of one growing list (``GrowingSteps``), so
    appending n steps and asking for the scenario after each costs O(n), not O(n²)."""

    def __init__(self, scenario: Scenario) -> None:
        self._scenario = scenario
        self._steps: list[Step] = list(scenario.steps)  # only ever appended to: views of it stay valid
        self._names = Names(scenario.config["components"], bool(scenario.config.get("hicache")),
                            bool(scenario.config.get("session_radix_cache")))
        for step in scenario.steps:  # replay the names, O(steps) once
            spec = ops.get(step.op)
            if spec is not None:
                self._names.track(spec, step.fields, step.expect_error is not None, scenario.path,
                                  lambda field=None, step=step: step.line or None)

    @property
    def scenario(self) -> Scenario:
        if len(self._scenario.steps) != len(self._steps):
            self._scenario = dataclasses.replace(self._scenario, steps=GrowingSteps(self._steps, len(self._steps)),
                                                 notices=())
        return self._scenario

    @property
    def count(self) -> int:
        return len(self._steps)

    @property
    def names(self) -> dict[str, list[str]]:
        """Names a command may refer to now, per namespace: matches, held locks, running requests."""
        return {space: sorted(live) for space, live in self._names.live.items()}

    def check(self, raw: Any, line: int = 0) -> Step:
        """The step ``raw`` would be if appended now (raises ScenarioError; changes nothing)."""
        try:
            return self._checked(raw, line)
        finally:
            self._names.rollback()

    def append(self, raw: Any, line: int = 0) -> Step:
        """Check ``raw`` and add it as the last step; returns it."""
        try:
            step = self._checked(raw, line)
        except BaseException:
            self._names.rollback()
            raise
        self._names.commit()
        self._steps.append(step)
        return step

    def _checked(self, raw: Any, line: int) -> Step:
        path = self._scenario.path
        if not isinstance(raw, dict):
            raise ScenarioError("each step must be a table of fields", path, line or None)
        self._names.begin()
        return check_step(self.count, raw, path, lambda field=None: line or None, self._scenario.config, self._names)


class _TomlLines:
    """Line numbers for TOML tables and fields (tomllib keeps none)."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.steps = [i + 1 for i, l in enumerate(self.lines) if re.match(r"\s*\[\[\s*step\s*\]\]", l)]
        self.sections = {
            m.group(1): i + 1 for i, l in enumerate(self.lines) if (m := re.match(r"\s*\[\s*([A-Za-z_]+)\s*\]\s*(#.*)?$", l))
        }

    def _find(self, start: int, end: int, field: Optional[str]) -> int:
        if field:
            pat = re.compile(rf"\s*{re.escape(field)}\s*=|.*[{{,]\s*{re.escape(field)}\s*=")
            for i in range(start, min(end, len(self.lines) + 1)):
                if pat.match(self.lines[i - 1]):
                    return i
        return start

    def _end(self, start: int) -> int:
        later = [n for n in self.steps + list(self.sections.values()) if n > start]
        return min(later) if later else len(self.lines) + 1

    def top(self, key: str) -> Optional[int]:
        if key == "step":
            single = next((i + 1 for i, l in enumerate(self.lines) if re.match(r"\s*\[\s*step\s*\]", l)), None)
            return self.steps[0] if self.steps else (single or 1)
        return self._find(1, self._end(0), key)

    def section(self, name: str, field: Optional[str] = None) -> Optional[int]:
        start = self.sections.get(name)
        if start is None:
            return 1  # a missing table: point at the top of the file
        return self._find(start, self._end(start), field)

    def step(self, i: int, field: Optional[str] = None) -> Optional[int]:
        if i >= len(self.steps):
            return None
        start = self.steps[i]
        return self._find(start, self._end(start), field)
