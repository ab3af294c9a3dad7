"""Rebuild the states of a ``urc run --json --states`` file (``state_deltas``' lines).

``state_at(path, step)`` gives the state after one step and ``states(path)`` every
state in turn, each as ``urc run --json --full-states`` writes it (``export.state_json``:
nodes depth first with their paths, LRU orders as paths, pools, metrics). ``state_at``
finds the last keyframe at or before the step by each line's first bytes, without
parsing, then replays at most ``keyframe_every`` deltas. The file is untrusted: it is
read a line at a time (a line is at most ``MAX_LINE_BYTES``), parsed as JSON only, and
anything not as urc writes it is one ``ScenarioError`` naming the file and line. A last
line cut short (an interrupted run) ends the file: the steps before it still rebuild.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, BinaryIO, Optional

from ..scenarios.errors import DATA_ERRORS, ScenarioError
from ..scenarios.inputs import open_regular
from .state_deltas import FORMAT, VERSION

MAX_LINE_BYTES = 256 << 20
_HEADER = "the first line must be a run header {\"kind\": \"run\", \"format\": \"urc-states\", …} " \
          "(urc run --json --states writes one)"
_RUN, _KEYFRAME, _STEP = b'{"kind":"run"', b'{"kind":"keyframe","index":', b'{"kind":"step","index":'


class RebuiltState:
    """One run's state as the lines so far leave it; ``json()`` gives it as ``state_json`` does."""

    def __init__(self, header: dict[str, Any]) -> None:
        self.root = header["root"]
        self.page_size = int(header["page_size"])
        self.lru_names = list(header["lru"])
        self.index = 0
        self.load(header["state"])

    def load(self, state: dict[str, Any]) -> None:
        """A keyframe: the state whole."""
        self.nodes = {}
        for node in state["nodes"]:
            self.nodes[int(node["id"])] = node
        self.lru = {name: list(state["lru"][name]) for name in self.lru_names}
        self.pools = dict(state["pools"])
        self.metrics = dict(state["metrics"])

    def apply(self, delta: dict[str, Any]) -> None:
        """A step's changes: replaced or new nodes, dropped ones, moved LRU places, counters."""
        for node in delta.get("nodes", ()):
            self.nodes[int(node["id"])] = node
        for node_id in delta.get("drop", ()):
            del self.nodes[node_id]
        for name, moves in delta.get("lru", {}).items():
            order = self.lru[name]
            gone = set(moves["drop"])
            if gone:
                order[:] = [i for i in order if i not in gone]
            for place, node_id in moves["put"]:
                order.insert(place, node_id)
        for table, changes in ((self.pools, delta.get("pools", {})), (self.metrics, delta.get("metrics", {}))):
            for name, value in changes.items():
                if value is None:
                    del table[name]
                else:
                    table[name] = value

    def json(self) -> dict[str, Any]:
        """Nodes depth first, children by (namespace, first page) as the tree orders them,
        the root left out; each LRU order as paths, MRU first."""
        children: dict[int, list[dict]] = {}
        for node in self.nodes.values():
            children.setdefault(node["parent"], []).append(node)
        size = self.page_size
        for kids in children.values():
            kids.sort(key=lambda n: (n.get("ns", ("", "", -1)), n["key"][:size]))
        paths: dict[int, list[int]] = {self.root: []}
        out = []
        stack = list(reversed(children.get(self.root, ())))
        while stack:
            node = stack.pop()
            path = paths[node["id"]] = paths[node["parent"]] + node["key"]
            out.append({"path": path, "key": node["key"], "components": node["components"]})
            stack.extend(reversed(children.get(node["id"], ())))
        if len(out) != len(self.nodes):
            raise ValueError(f"{len(self.nodes) - len(out)} nodes are not under the root")
        return {"nodes": out, "lru": {name: [paths[i] for i in self.lru[name]] for name in self.lru_names},
                "pools": dict(self.pools), "metrics": dict(self.metrics)}


def states(path: str, run: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(step, state)`` for step 0 (before the first) to the last complete step of the
    ``run``-th run in the file (0: the first scenario ``urc run`` was given)."""
    with _Lines(path) as lines:
        for index, state in lines.replay(run, None):
            yield index, lines.built(state.json)


def state_at(path: str, step: int, run: int = 0) -> dict[str, Any]:
    """The state after ``step`` (0: before the first) of the ``run``-th run in the file."""
    if step < 0:
        raise ScenarioError(f"no step {step}: steps count from 0 (the state before the first step)", path)
    with _Lines(path) as lines:
        last = None
        for index, state in lines.replay(run, step):
            last = index
            if index == step:
                return lines.built(state.json)
        ends = "has no step lines" if last is None else f"ends after step {last}"
        raise ScenarioError(f"no step {step}: run {run} {ends}", path)


class _Lines:
    """The file a line at a time, with its line numbers and byte offsets."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.file: BinaryIO = open(open_regular(path, "states file"), "rb")
        self.lineno = 0

    def __enter__(self) -> _Lines:
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()

    def read(self) -> Optional[bytes]:
        """The next line (None at the end); a line past ``MAX_LINE_BYTES`` is refused."""
        line = self.file.readline(MAX_LINE_BYTES + 1)
        if not line:
            return None
        self.lineno += 1
        if len(line) > MAX_LINE_BYTES:
            raise ScenarioError(f"a line longer than {MAX_LINE_BYTES >> 20} MiB", self.path, self.lineno)
        return line

    def locate(self, run: int, step: Optional[int]) -> tuple[tuple[int, int], Optional[tuple[int, int]]]:
        """(byte offset, line number) of the run's header and of the last keyframe at or
        before ``step`` in it (None: none, or no ``step``), found by each line's first
        bytes without parsing; the first line is parsed, so a file of another kind is
        refused at once."""
        first = self._record()
        if first is None:
            raise ScenarioError(f"empty: {_HEADER}", self.path, 1)
        _check_header(first, self.path, self.lineno)
        runs, header, found = 0, (0, 1), None
        while run > 0 or step is not None:
            offset, line = self.file.tell(), self.read()
            if line is None:
                break
            if line.startswith(_RUN):
                if runs == run:
                    break
                runs += 1
                header = (offset, self.lineno)
                if runs == run and step is None:
                    break
            elif runs == run and step is not None and line.startswith((_KEYFRAME, _STEP)):
                index = _index(line)
                if index is None or index > step:
                    break
                if line.startswith(_KEYFRAME):
                    found = (offset, self.lineno)
        if runs < run:
            raise ScenarioError(f"no run {run}: the file holds {runs + 1}", self.path)
        return header, found

    def replay(self, run: int, step: Optional[int]) -> Iterator[tuple[int, RebuiltState]]:
        """The run's states in turn: from the keyframe ``locate`` finds, else from its header."""
        header_at, keyframe_at = self.locate(run, step)
        self._goto(header_at)
        header = self._record()
        _check_header(header, self.path, self.lineno)
        state = self.built(RebuiltState, header)
        if keyframe_at is not None:
            self._goto(keyframe_at)
        else:
            yield 0, state
        while (record := self._record()) is not None:
            kind = record.get("kind")
            if kind in ("run", "end"):
                return
            if kind not in ("step", "keyframe"):
                raise ScenarioError(f"not a states line: kind {str(kind)[:40]!r}", self.path, self.lineno)
            index = record.get("index")
            if keyframe_at is not None:  # the line found: a keyframe, whatever step it is
                if kind != "keyframe" or not isinstance(index, int):
                    raise ScenarioError("not the keyframe its first bytes say", self.path, self.lineno)
                keyframe_at = None
            elif index != state.index + 1:
                raise ScenarioError(f"step {str(index)[:40]} follows step {state.index}", self.path, self.lineno)
            if kind == "keyframe":
                self.built(state.load, record.get("state"))
            else:
                self.built(state.apply, record.get("delta"))
            state.index = index
            yield index, state
            if step is not None and index >= step:
                return

    def _goto(self, where: tuple[int, int]) -> None:
        self.file.seek(where[0])
        self.lineno = where[1] - 1

    def _record(self) -> Optional[dict[str, Any]]:
        """The next line as a JSON object; None at the end or at a last line cut short."""
        while (line := self.read()) is not None:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError) as exc:  # JSONDecodeError, not UTF-8, an int too long
                if not line.endswith(b"\n") and self.lineno > 1:  # the last line, cut short
                    return None
                if self.lineno == 1 and line.lstrip().startswith(b"["):
                    raise ScenarioError("not a urc states file: a JSON array (urc run --json, or --full-states, "
                                        "which holds each state whole)", self.path, 1) from None
                decoding = isinstance(exc, json.JSONDecodeError)
                said = f"{exc.msg} (column {exc.colno})" if decoding else type(exc).__name__
                raise ScenarioError(f"malformed JSON: {said}", self.path, self.lineno) from None
            if not isinstance(record, dict):
                raise ScenarioError("each line must be a JSON object", self.path, self.lineno)
            return record
        return None

    def built(self, apply, *values):
        """``apply(*values)``, a value not as urc writes it said in one line at its line."""
        try:
            return apply(*values)
        except DATA_ERRORS as exc:
            first = (str(exc).splitlines() or [""])[0][:80]
            raise ScenarioError(f"not a states line as urc writes it ({type(exc).__name__}: {first})", self.path,
                                self.lineno) from None


def _check_header(record: Optional[dict[str, Any]], path: str, lineno: int) -> None:
    if record is None or record.get("kind") != "run":
        raise ScenarioError(f"not a urc states file: {_HEADER}", path, lineno)
    if record.get("format") != FORMAT or record.get("version") != VERSION:
        raise ScenarioError(f"not a {FORMAT} version {VERSION} header", path, lineno)


def _index(line: bytes) -> Optional[int]:
    """The step index a step or keyframe line starts with (None: not digits)."""
    start = line.index(b":", line.index(b'"index"')) + 1
    end = line.find(b",", start)
    digits = line[start:end]
    return int(digits) if digits.isdigit() and len(digits) < 19 else None
