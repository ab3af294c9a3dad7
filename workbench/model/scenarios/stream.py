"""A JSONL trace read one line at a time (``urc run TRACE --store``).

``load_scenario`` holds a whole trace in memory — about seven times its file size —
which caps a run at a few hundred thousand steps. Streaming reads the header, then
checks each step line exactly as the loader would (the same messages, ``file:line``)
only when the runner asks for it, so memory stays flat whatever the length. A bad
line is found when it is reached: the steps before it have already run.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

from .errors import ScenarioError
from .inputs import open_regular
from .names import Names
from .scenario import Scenario, _build, check_header, parse_line
from .step import Step, check_step


@dataclasses.dataclass
class TraceStream:
    """The trace's header as a step-less ``Scenario`` and its steps on demand.

    ``steps()`` yields ``(step, last)``: ``last`` is True for the final step, so the
    runner can give it the end-of-run sweep. ``notices`` gains a line when the last
    line was cut short (an interrupted recording), which is dropped as the loader does."""

    scenario: Scenario
    _lines: Iterator[tuple[int, bytes]]
    _first: Optional[tuple[int, Any]]
    _file: Any = None
    notices: list[str] = dataclasses.field(default_factory=list)
    count: int = 0  # steps yielded so far

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def steps(self) -> Iterator[tuple[Step, bool]]:
        config, path = self.scenario.config, self.scenario.path
        names = Names(config["components"], bool(config.get("hicache")), bool(config.get("session_radix_cache")))
        pending = self._first
        while pending is not None:
            refused: Optional[ScenarioError] = None
            try:
                following = self._next_record()  # read ahead: is this step the last?
            except ScenarioError as exc:  # the next line is bad: run this step first, then stop
                following, refused = None, exc
            lineno, raw = pending
            if not isinstance(raw, dict):
                raise ScenarioError("each step line must be a JSON object", path, lineno)
            step = check_step(self.count, raw, path, lambda field=None, n=lineno: n, config, names)
            self.count += 1
            yield step, following is None and refused is None
            if refused is not None:
                raise refused
            pending = following

    def _next_record(self) -> Optional[tuple[int, Any]]:
        """The next non-blank, non-comment line, parsed; None at the end."""
        for lineno, raw in self._lines:
            text = raw.strip()
            if not text or text.startswith(b"#"):
                continue
            try:
                return lineno, parse_line(raw, self.scenario.path, lineno)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                if not raw.endswith(b"\n") and lineno > 1:  # the file's last line, with no newline
                    self.notices.append(f"{self.scenario.path}:{lineno}: dropped a truncated last line "
                                        "(an interrupted recording)")
                    return None
                message = f"{exc.msg} (column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
                raise ScenarioError(f"malformed JSON: {message}", self.scenario.path, lineno) from None
        return None


def open_trace(path: str | Path) -> TraceStream:
    """Open a JSONL trace for streaming: its header is read and checked now."""
    name = str(path)
    if not name.endswith(".jsonl"):
        raise ScenarioError("streams only JSONL traces (.jsonl)", name)
    fd = open_regular(name, "trace")
    stream = open(fd, "rb")
    lines = enumerate(stream, 1)
    placeholder = Scenario(name, "", "", "", {}, (), {})
    reader = TraceStream(placeholder, lines, None, stream)
    try:
        head = reader._next_record()
        if head is None:
            raise ScenarioError("empty file: line 1 must be the header {\"schema\": 1, \"scenario\": …, "
                                "\"config\": …}", name, 1)
        head_line, header = head
        check_header(header, name, head_line)
        scenario = _build(header.get("scenario"), header.get("config"), [], name,
                          lambda section, field=None: head_line, lambda i, field=None: head_line)
        reader.scenario = dataclasses.replace(scenario, notices=())
        reader._first = reader._next_record()
    except BaseException:  # a bad header (or first step line): the file is not left open
        reader.close()
        raise
    return reader
