"""Follow a JSONL trace while another process writes it (``urc tui --follow``).

The writer (a recorder, a fuzzer) appends one step per line and flushes per line, so
the reader only ever takes complete lines: a last line without its newline is still
being written and waits for the next poll. Reading is incremental — a poll stats the
file, and reads only the bytes added since the last one — so following a long trace
costs what it grows by. Anything that makes the bytes already read untrustworthy (the
file deleted, replaced, truncated or rewritten) stops the follower with a
``FollowError``; the steps read before stay with the caller.

Usage::

    follower = TraceFollower(path)
    scenario = follower.start()      # None while the header line is incomplete:
    ...                              # show follower.waiting, call start() again later
    cursor = TimelineCursor([scenario]); cursor.load(0)
    cursor.extend(follower.poll())   # on a timer; [] when nothing new
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, BinaryIO, Optional

from ..scenarios.errors import shown
from ..scenarios.inputs import DuplicateKeyError, TooLarge, loads_unique, special_kind
from ..scenarios.scenario import MAX_FILE_BYTES, Scenario, ScenarioError, _load_jsonl

FINGERPRINT_BYTES = 64  # the last bytes read, re-read to notice a rewrite in place


class FollowError(ScenarioError):
    """The followed trace can no longer be trusted or read; following has stopped and
    the steps read so far are kept (``file:line: message``, one line)."""


class TraceFollower:
    """Reads a growing schema-1 JSONL trace: ``start()`` once for the header and the
    steps already there, then ``poll()`` for the step lines added since.

    After a ``FollowError`` the follower is stopped for good: ``stopped`` holds the
    error and every later ``poll()`` raises it again (never a silent ``[]``). A bad line
    that arrives after good ones in the same poll is reported by the next poll, so the
    good lines before it are still returned."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.name = str(path)
        self.scenario: Optional[Scenario] = None  # set by start() once the header is complete
        self.waiting: Optional[str] = f"waiting for {self.name} to appear"  # why start() has no scenario yet
        self.stopped: Optional[FollowError] = None
        self.lines = 0  # complete lines read (the last step's line number, or the header's)
        self.steps = 0  # step lines read, including those in the scenario start() returned
        self._file: Optional[BinaryIO] = None
        self._identity: Optional[tuple[int, int]] = None  # (device, inode) of the file being read
        self._seen: Optional[tuple[int, int]] = None  # (size, mtime_ns) at the last read: nothing new if unchanged
        self._read_to = 0  # bytes read from the file; complete lines end at _read_to - len(_partial)
        self._partial = b""  # the last line, read but not yet ended by a newline
        self._fingerprint = b""  # the last bytes read, to notice them changing

    # ---- the header ------------------------------------------------------------------------------
    def start(self) -> Optional[Scenario]:
        """The scenario in the trace so far (its header and complete step lines), or
        None while the file is missing or its header line is incomplete (``waiting``
        says which). A header or step line the loader refuses raises ``ScenarioError``
        with its message. Call again until it returns the scenario."""
        if self.scenario is not None:
            return self.scenario
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            self.waiting = f"waiting for {self.name} to appear"
            return None
        except OSError as exc:
            raise ScenarioError(f"cannot read file: {exc.strerror or exc}", self.name) from None
        kind = special_kind(stat.st_mode)
        if kind is not None:  # a FIFO or a device never ends; only a file grows line by line
            raise ScenarioError(f"is {kind}, not a trace; urc follows only regular files", self.name)
        if (stat.st_size, stat.st_mtime_ns) == self._seen and _identity(stat) == self._identity:
            return None  # nothing changed while waiting for the header
        data = self._read_whole(stat)
        complete = data[:data.rfind(b"\n") + 1]
        if not complete.strip():
            self.waiting = f"waiting for the header line of {self.name}"
            return None
        try:
            text = complete.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ScenarioError(f"not UTF-8 text (byte {exc.start})", self.name,
                                complete.count(b"\n", 0, exc.start) + 1) from None
        self.scenario = _load_jsonl(text.removeprefix("\ufeff"), self.name)
        self.waiting = None
        self.lines = complete.count(b"\n")
        self.steps = len(self.scenario.steps)
        self._partial = data[len(complete):]
        self._read_to = len(data)
        self._fingerprint = data[-FINGERPRINT_BYTES:]
        return self.scenario

    def _read_whole(self, stat: os.stat_result) -> bytes:
        """The file as it is now (the header and what came with it), kept open after."""
        self.close()
        if stat.st_size > MAX_FILE_BYTES:
            raise ScenarioError(f"urc follows traces up to {MAX_FILE_BYTES // 2**30} GiB", self.name)
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO swapped in since the stat never blocks
            self._file = os.fdopen(fd, "rb")
            stat = os.fstat(self._file.fileno())
            if special_kind(stat.st_mode) is not None:  # replaced between the stat and the open
                self.close()
                return b""
            data = self._file.read(min(stat.st_size, MAX_FILE_BYTES))
        except FileNotFoundError:
            self.close()
            return b""  # deleted between the stat and the open: wait for it again
        except IsADirectoryError:
            raise ScenarioError("is a directory, not a trace", self.name) from None
        except OSError as exc:
            raise ScenarioError(f"cannot read file: {exc.strerror or exc}", self.name) from None
        self._identity = _identity(stat)
        self._seen = (stat.st_size, stat.st_mtime_ns)
        return data

    # ---- the steps -----------------------------------------------------------------------------
    def poll(self) -> list[tuple[dict[str, Any], int]]:
        """The step lines completed since the last poll, as (fields, line number): the
        input ``TimelineCursor.extend`` takes. A stat and nothing more when the file has
        not changed; otherwise only the new bytes are read."""
        if self.stopped is not None:
            raise self.stopped
        if self.scenario is None or self._file is None:
            raise RuntimeError("the trace has no header yet: call start() until it returns the scenario")
        stat = self._changed_stat()
        if stat is None:
            return []
        self._file.seek(self._read_to)
        data = self._file.read(stat.st_size - self._read_to)
        self._seen = (stat.st_size, stat.st_mtime_ns)
        if not data:
            return []
        self._read_to += len(data)
        self._fingerprint = (self._fingerprint + data)[-FINGERPRINT_BYTES:]
        pieces = (self._partial + data).split(b"\n")
        self._partial = pieces.pop()  # after the last newline: not complete yet
        steps: list[tuple[dict[str, Any], int]] = []
        for raw in pieces:
            self.lines += 1
            if not raw.strip() or raw.lstrip().startswith(b"#"):
                continue  # the loader skips blank and comment lines too
            try:
                steps.append((self._step(raw), self.lines))
            except FollowError as exc:
                self._stop(exc)
                if steps:
                    break  # return the good lines; the next poll raises
                raise
            self.steps += 1
        return steps

    def _changed_stat(self) -> Optional[os.stat_result]:
        """The file's stat when it has new bytes or changed, None when not; a FollowError
        when what was read can no longer be trusted."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            raise self._stop(self._error("the trace was deleted")) from None
        except OSError as exc:
            raise self._stop(self._error(f"cannot read the trace: {exc.strerror or exc}")) from None
        if _identity(stat) != self._identity:
            raise self._stop(self._error("the trace was replaced by another file (a new inode at that path)"))
        if stat.st_size < self._read_to:
            raise self._stop(self._error(
                f"the trace shrank to {stat.st_size:,} bytes, below the {self._read_to:,} already read "
                "(truncated or rewritten)"))
        if (stat.st_size, stat.st_mtime_ns) == self._seen:
            return None
        if stat.st_size > MAX_FILE_BYTES:
            raise self._stop(self._error(f"the trace grew past {MAX_FILE_BYTES // 2**30} GiB, the most urc follows"))
        start = self._read_to - len(self._fingerprint)
        self._file.seek(start)
        if self._file.read(len(self._fingerprint)) != self._fingerprint:
            raise self._stop(self._error("the trace was rewritten: bytes already read have changed"))
        return stat

    def _step(self, raw: bytes) -> dict[str, Any]:
        """One complete line as a step's fields, with the loader's messages."""
        try:
            value = loads_unique(raw.decode("utf-8"))
        except DuplicateKeyError as exc:
            raise self._error(f"key {shown(exc.key)} is given twice in one object", self.lines) from None
        except UnicodeDecodeError as exc:
            raise self._error(f"not UTF-8 text (byte {exc.start} of the line)", self.lines) from None
        except RecursionError:
            raise self._error("a value is nested too deeply", self.lines) from None
        except TooLarge as exc:
            raise self._error(str(exc), self.lines) from None
        except json.JSONDecodeError as exc:
            raise self._error(f"malformed JSON: {exc.msg} (column {exc.colno})", self.lines) from None
        if not isinstance(value, dict):
            raise self._error("each step line must be a JSON object", self.lines)
        return value

    def _error(self, what: str, line: Optional[int] = None) -> FollowError:
        kept = f"the {self.steps} step{'s' if self.steps != 1 else ''} read so far are kept"
        return FollowError(f"{what}; stopped following ({kept})", self.name, line)

    def _stop(self, error: FollowError) -> FollowError:
        self.stopped = error
        self.close()
        return error

    # ---- the file --------------------------------------------------------------------------------
    @property
    def pending_bytes(self) -> int:
        """Bytes of a line still being written (shown as "a line is arriving")."""
        return len(self._partial)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> TraceFollower:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return (stat.st_dev, stat.st_ino)
