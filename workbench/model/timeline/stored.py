"""A timeline on disk: ``urc run TRACE --store RUN.urcdb``, opened again by ``urc tui``.

The in-memory timeline keeps every step, so its size grows with the run. This one
streams each step's delta, the records it replaced, its totals and its record into one
SQLite file as the steps are checked, in a transaction every ``BATCH_STEPS`` steps, so
memory holds the live tree and one batch whatever the length, and a crash loses at
most the batch being written (the file stays readable: SQLite's journal).

A state is rebuilt from the nearest keyframe and the deltas after it, as in memory
(``states.StateStore``); keyframes are written when replaying would read more records
than a whole tree holds (or every ``KEYFRAME_MAX_STEPS``), so a jump anywhere costs
about two trees' worth of records. A node's key is stored once per node (table
``keys``), not in every record that mentions the node. Everything else is written by
``store_codec``, each value of 1 KB or more compressed. A store is untrusted input when it is opened:
``store_file`` opens it read-only and checks it, every value is read within limits, and
what the cache's decoded rows hold is bounded per column (``store_columns``).

``DiskTimeline`` is a ``Timeline``: the cursor, diff, why, breakpoints and charts read it
through the same ``records`` and ``store`` sequences, a step at a time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Optional

import numpy as np

from cache.observe.views import GlobalRecord

from ..scenarios.scenario import Scenario, ScenarioError
from .step_index import KINDS, EventCoder, step_names
from .series import RowMaker
from .states import Records, StateShape, StateStore, apply_delta
from .store_columns import StoredColumn, StoredKeyframes, sequence_item
from .store_file import FORMAT, StoreError, StoreFile, encode, encode_plain  # noqa: F401  (StoreError: re-exported)
from .store_rows import packed_records, record_row, rows_blob, series_rows, step_record, summary_of, typed
from .timeline import StepRecord, Timeline

SUFFIX = ".urcdb"
BATCH_STEPS = 256  # steps per transaction: what a crash can lose
KEYFRAME_MAX_STEPS = 1024

# ---- the store ---------------------------------------------------------------------------------------


class DiskStateStore(StateStore):
    """``StateStore`` with its per-step lists in the file: the same reads (``state``,
    ``deltas``, ``befores``, ``globals``, ``keyframes``, ``current``), the same ``append``."""

    def __init__(self, file: StoreFile, shape: StateShape, initial_globals: GlobalRecord, current: Records,
                 length: int) -> None:
        self.file = file
        self.shape = shape
        self.keyframe_every = KEYFRAME_MAX_STEPS
        self.current = current
        self._length = length
        self.pending: dict[int, dict[str, Any]] = {}  # steps not yet written: column -> value
        self.pending_keyframes: list[tuple[int, Records]] = []
        self.events = EventCoder(KINDS, shape.components)  # the index of kinds' codes (a reader: the file's)
        self._since_keyframe = 0  # records a rebuild would replay since the last keyframe
        self._steps_since = 0
        self._cache = {}
        records = lambda value: file.unpack(packed_records(value, file.path))  # noqa: E731
        self.deltas = StoredColumn(self, "delta", records, {})
        self.befores = StoredColumn(self, "before", records, {})
        self.globals = StoredColumn(self, "globals", lambda value: typed(value, GlobalRecord, "a step's totals",
                                                                          file.path), initial_globals)
        self.records = StoredColumn(self, "record", self._record, None)  # [0] is nothing: steps are 1-based
        self.keyframes = StoredKeyframes(self)
        self.summary: dict[str, Any] = {"ops": [], "names_session": False}  # what a viewer asks of every step
        self.rows: Optional[RowMaker] = None  # the writer's: each step's row of the charts' numbers

    def __len__(self) -> int:
        return self._length

    def append(self, delta: dict, globals_: GlobalRecord) -> None:
        current = self.current
        before = {node_id: current.get(node_id) for node_id in delta}
        apply_delta(current, delta)
        self._length += 1
        self.pending[self._length] = {"delta": delta, "before": before, "globals": globals_}
        self._since_keyframe += len(delta) + 1
        self._steps_since += 1
        if self._since_keyframe > 2 * len(current) + 64 or self._steps_since >= KEYFRAME_MAX_STEPS:
            self.keyframe()

    def keyframe(self) -> None:
        if not self.pending_keyframes or self.pending_keyframes[-1][0] != self._length:
            self.pending_keyframes.append((self._length, dict(self.current)))
        self._since_keyframe = self._steps_since = 0

    def add_record(self, record: StepRecord) -> None:
        row = self.pending[record.index]
        row["series"] = self.rows.row(row["globals"], row["delta"], row["before"])
        step = record.step
        if step.op not in self.summary["ops"]:
            self.summary["ops"].append(step.op)
        if not self.summary["names_session"] and step.fields.get("session") is not None:
            self.summary["names_session"] = True
        row["record"] = record  # last: a row with its record is whole (``finish`` undoes the others)
        if len(self.pending) >= BATCH_STEPS:
            self.flush()

    def flush(self) -> None:
        """Write the finished steps and keyframes in one transaction."""
        file = self.file
        done = [i for i, row in self.pending.items() if "record" in row]
        with file.lock:  # every write idempotent: an interrupt after COMMIT leaves rows the next flush writes again
            file.db.execute("BEGIN")
            first_new_key = file.next_key
            try:
                file.db.executemany("INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?, ?, ?)", (
                    (i, row["record"].passed, encode_plain(file.pack(row["delta"])),
                     encode_plain(file.pack(row["before"])),
                     encode(row["globals"]), encode(record_row(row["record"]), compress=False))
                    for i in done for row in (self.pending[i],)))
                file.db.executemany("INSERT OR IGNORE INTO touches VALUES (?, ?)", (
                    (node, i) for i in done for node in {e.node for e in self.pending[i]["record"].events}
                    if node is not None))
                file.db.executemany("INSERT OR IGNORE INTO kinds VALUES (?, ?)", (
                    (code, i) for i in done for code in self.events.codes(self.pending[i]["record"].events)))
                file.db.executemany("INSERT OR IGNORE INTO names VALUES (?, ?, ?)", (
                    (field, value, i) for i in done for step in (self.pending[i]["record"].step,)
                    for field, value in step_names(step.op, step.fields)))
                kept = [(i, records) for i, records in self.pending_keyframes if i <= (done[-1] if done else 0)]
                file.db.executemany("INSERT OR REPLACE INTO keyframes VALUES (?, ?)",
                                    ((i, encode_plain(file.pack(records))) for i, records in kept))
                if done:
                    file.db.execute("INSERT OR REPLACE INTO series VALUES (?, ?)", (done[0], rows_blob(
                        [self.pending[i]["series"] for i in done])))
                file.put_meta("summary", self.summary)
                file.db.execute("COMMIT")
            except BaseException:
                if file.db.in_transaction:  # (an interrupt can land after COMMIT too)
                    file.db.execute("ROLLBACK")
                    file.forget_keys_from(first_new_key)  # their rows went with the transaction
                raise
        for i in done:
            del self.pending[i]
        self.pending_keyframes = self.pending_keyframes[len(kept):]
        if len(file._key_ids) > 4 * len(self.current) + 1024:
            file.forget_keys(self.current)

    def _rebuild(self, index: int) -> Records:
        kept, records = self.keyframes.at_or_before(index)
        for delta in self.deltas.between(kept + 1, index):
            apply_delta(records, delta)
        return records

    def _record(self, value: Any) -> StepRecord:
        return step_record(value, self, self.file.path)

    def series_matrix(self) -> np.ndarray:
        """Every step's row of the charts' numbers (``series.RowMaker``), kept as the run
        wrote them: one read, not a pass over the steps. Its width is the one this
        store's shape gives, and it holds one row a step: no more is inflated."""
        file = self.file
        width = len(RowMaker(self.shape, {}, self.globals.start).row(self.globals.start))
        if file.meta("series_width") != width:
            raise StoreError("damaged store: the charts' rows are not as written", file.path)
        pending = [row["series"] for _, row in sorted(self.pending.items()) if "series" in row]
        room = (len(self) + 1 - len(pending)) * width * 8  # the bytes the written rows may hold
        written = []
        for _, blob in file.blobs("series", "first", "rows", "the charts' rows"):
            rows = series_rows(blob, width, file.path, limit=room)
            room -= rows.nbytes
            written.append(rows)
        if room:
            raise StoreError("damaged store: the charts' rows are not one a step", file.path)
        if pending:
            written.append(np.array(pending, dtype=np.int64).reshape(-1, width))
        return np.concatenate(written)

    def _indexed(self, sql: str, args: tuple, what: str, holds: Callable[[StepRecord], bool]) -> list[int]:
        """The steps one of the file's indexes lists (``sql``: their numbers, in order),
        then those of the writer's batch whose record ``holds``."""
        written = [i for (i,) in self.file.read(sql, args, what)]
        return written + [i for i, row in sorted(self.pending.items()) if "record" in row and holds(row["record"])]

    def steps_naming(self, node_id: int) -> list[int]:
        """Steps whose events name the node (``why``'s index, kept in the file)."""
        return self._indexed("SELECT idx FROM touches WHERE node = ? ORDER BY idx", (node_id,), "the steps' nodes",
                             lambda record: any(e.node == node_id for e in record.events))

    def steps_with_event(self, kind: str, component: Optional[str] = None) -> list[int]:
        """Steps with an event of ``kind`` (on ``component``): the index of kinds."""
        code = self.events.code(kind, component)
        if code is None:
            return []
        return self._indexed("SELECT idx FROM kinds WHERE code = ? ORDER BY idx", (code,), "the steps' events",
                             lambda record: code in self.events.codes(record.events))

    def steps_named(self, field: str, value: str) -> list[int]:
        """Steps whose ``field`` (``op``, by its name now; ``req``) is ``value``: the index of names."""
        return self._indexed("SELECT idx FROM names WHERE field = ? AND value = ? ORDER BY idx", (field, value),
                             "the steps' names",
                             lambda record: (field, value) in step_names(record.step.op, record.step.fields))

    def failing_indexes(self) -> list[int]:
        return self._indexed("SELECT idx FROM steps WHERE passed = 0 ORDER BY idx", (), "the failing steps",
                             lambda record: not record.passed)


class StoredRecords(Sequence):
    """``timeline.records`` on disk: ``records[i]`` is step ``i + 1``."""

    def __init__(self, store: DiskStateStore) -> None:
        self.store = store

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, index):
        return sequence_item(index, len(self), lambda first, last: self.store.records.between(first + 1, last + 1))

    def __iter__(self) -> Iterator[StepRecord]:
        return self.store.records.between(1, len(self))

    def append(self, record: StepRecord) -> None:
        self.store.add_record(record)


class StoredSteps(Sequence):
    """A stored run's ``scenario.steps``: each step read back with its record."""

    def __init__(self, records: StoredRecords) -> None:
        self.records = records

    @property
    def summary(self) -> dict[str, Any]:
        """The ops the run used and whether a step names a session (kept as it ran)."""
        return self.records.store.summary

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(r.step for r in self.records[index])
        return self.records[index].step

    def __iter__(self):
        return (r.step for r in self.records)


class DiskTimeline(Timeline):
    """A timeline whose steps live in a store file (see the module's docstring)."""

    def __init__(self, scenario: Scenario, store: DiskStateStore, complete: bool = True) -> None:
        records = StoredRecords(store)
        scenario = dataclasses.replace(scenario, steps=StoredSteps(records))
        super().__init__(scenario, store, records)
        self.complete = complete  # False: the run that wrote it was interrupted (or is still writing)

    @property
    def path(self) -> str:
        return self.store.file.path

    @property
    def passed(self) -> bool:
        return not self.store.failing_indexes()

    @property
    def first_failure(self) -> Optional[StepRecord]:
        failing = self.store.failing_indexes()
        return self.records[failing[0] - 1] if failing else None

    def failing(self) -> list[StepRecord]:
        return [self.records[i - 1] for i in self.store.failing_indexes()]

    def finish(self, complete: bool, notices: Sequence[str] = ()) -> None:
        """Write what is pending and the last state as a keyframe; mark the run
        complete (or interrupted), so reopening says which."""
        store = self.store
        for index in sorted((i for i, row in store.pending.items() if "record" not in row), reverse=True):
            apply_delta(store.current, store.pending.pop(index)["before"])  # a step cut short is undone
        store._length = max(store.pending, default=store.file.steps())
        store.pending_keyframes = [k for k in store.pending_keyframes if k[0] <= store._length]
        store.keyframe()
        store.flush()
        file = store.file
        with file.lock:
            file.put_meta("steps", len(store))
            file.put_meta("complete", complete)
            file.put_meta("notices", list(notices))
        file.seal()
        self.complete = complete

    def close(self) -> None:
        self.store.file.close()


class StoredRun:
    """What the cursor holds in place of a runner for a stored chapter: already run,
    and read-only (a live op would need the cache it ran on)."""

    done = True
    read_only = True

    def __init__(self, timeline: DiskTimeline) -> None:
        self.timeline = timeline

    @property
    def scenario(self) -> Scenario:
        return self.timeline.scenario

    def refuse(self) -> ScenarioError:
        return ScenarioError("a stored run is read-only: to try ops on it, run the trace itself (urc tui TRACE)",
                             self.timeline.path)


# ---- making and opening ------------------------------------------------------------------------------


def create_store(path: str, runner) -> DiskTimeline:
    """Send a fresh runner's timeline to a new store file at ``path`` (the caller has
    checked it may be written): from now on its steps stream to the file."""
    old = runner.timeline
    if len(old):
        raise ValueError("a store starts with the run: this runner has already run steps")
    file = StoreFile.create(path)
    try:
        rows = _write_start(file, old)
    except BaseException:
        file.close()  # (the caller removes the file)
        raise
    store = DiskStateStore(file, old.store.shape, old.store.globals[0], dict(old.store.current), 0)
    store.rows = rows
    timeline = DiskTimeline(old.scenario, store, complete=False)
    timeline.listeners = old.listeners
    runner.timeline = timeline
    return timeline


def _write_start(file: StoreFile, old) -> RowMaker:
    """The store's header and step 0 in one transaction: the scenario, the start state
    and its row of the charts' numbers."""
    scenario = old.scenario
    with file.lock:
        file.db.execute("BEGIN")
        file.put_meta("format", FORMAT)
        file.put_meta("header", scenario.header())
        file.put_meta("path", scenario.path)
        file.put_meta("shape", dataclasses.replace(old.store.shape, child_keys={}, order_keys={}))
        file.put_meta("initial_globals", old.store.globals[0])
        file.put_meta("complete", False)
        file.db.execute("INSERT INTO keyframes VALUES (0, ?)", (encode_plain(file.pack(old.store.current)),))  # the start
        rows = RowMaker(old.store.shape, old.store.current, old.store.globals[0])
        start = rows.row(old.store.globals[0])
        file.put_meta("series_width", len(start))
        file.put_meta("event_kinds", list(KINDS))
        file.db.execute("INSERT INTO series VALUES (0, ?)", (rows_blob([start]),))
        file.db.execute("COMMIT")
    return rows


def open_store(path: str) -> DiskTimeline:
    """A store written by ``urc run --store``, read-only; what a crash left is opened
    as far as it was committed."""
    from ..scenarios.scenario import _build

    file = StoreFile.open(path)
    try:
        header = file.meta("header")
        if not (isinstance(header, dict) and isinstance(header.get("scenario"), dict)
                and isinstance(header.get("config"), dict)):
            raise StoreError("damaged store: its scenario header is not as written", path)
        scenario = _build(header["scenario"], header["config"], [], path, lambda *_: None, lambda *_: None)
        length = file.steps()
        shape = typed(file.meta("shape"), StateShape, "its shape", path)
        initial = typed(file.meta("initial_globals"), GlobalRecord, "its start", path)
        store = DiskStateStore(file, shape, initial, {}, length)
        store.current = store._rebuild(length)
        store.summary = summary_of(file.meta("summary", store.summary), path)
        kinds = file.meta("event_kinds")
        if not (isinstance(kinds, list) and all(isinstance(k, str) for k in kinds)):
            raise StoreError("damaged store: its event kinds are not as written", path)
        try:
            store.events = EventCoder(kinds, shape.components)
        except ValueError as exc:
            raise StoreError(f"damaged store: {exc}", path) from None
        complete = file.meta("complete", False) is True and file.meta("steps", -1) == length
        notices = file.meta("notices", [])
        if not (isinstance(notices, list) and all(isinstance(n, str) for n in notices)):
            raise StoreError("damaged store: its notices are not as written", path)
        notices = [*file.notices, *notices]
    except BaseException:
        file.close()
        raise
    if not complete:
        notices.append(f"{path}: the run that wrote this store stopped early; its first {length:,} steps are here")
    timeline = DiskTimeline(dataclasses.replace(scenario, notices=tuple(notices)), store, complete)
    return timeline

