"""A listened stream kept on disk (``urc listen --store RUN.urcdb``): every batch as the
bytes it arrived in, and every problem line, in an SQLite file written as they come
(committed every ``COMMIT_EVERY`` batches), so memory stays flat however long one listens.
Reopened, the batches are decoded strictly again and replayed into a fresh view: the
file holds what the server sent, never code."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from typing import Optional

import msgspec

from ..scenarios.scenario import ScenarioError
from . import wire
from .listener import Received
from .view import ConsumerView

FORMAT = "kv-listen-1"
COMMIT_EVERY = 512
_SCHEMA = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE batches (n INTEGER PRIMARY KEY, seq INTEGER NOT NULL, payload BLOB NOT NULL);
CREATE TABLE problems (n INTEGER PRIMARY KEY, after INTEGER NOT NULL, text TEXT NOT NULL);
"""


class ListenStore:
    def __init__(self, path: str, endpoint: str) -> None:
        if os.path.lexists(path):
            os.unlink(path)  # the caller checked it may (--force)
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.executescript(_SCHEMA)
        self.db.executemany("INSERT INTO meta VALUES (?, ?)", [("format", FORMAT), ("endpoint", endpoint)])
        self._rows: list[tuple[int, int, bytes]] = []
        self._problems: list[tuple[int, str]] = []
        self._n = 0

    def add(self, item: Received) -> None:
        self._rows.append((self._n, item.seq, item.payload))
        self._n += 1
        if len(self._rows) >= COMMIT_EVERY:
            self.flush()

    def problem(self, text: str) -> None:
        self._problems.append((self._n, text))

    def flush(self) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT INTO batches VALUES (?, ?, ?)", self._rows)
            self.db.executemany("INSERT INTO problems (after, text) VALUES (?, ?)", self._problems)
        self._rows.clear()
        self._problems.clear()

    def close(self) -> None:
        self.flush()
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.execute("PRAGMA journal_mode = DELETE")
        self.db.close()


def is_listen_store(path: str) -> bool:
    """A ``.urcdb`` file ``urc listen --store`` wrote (not a run's timeline store)."""
    try:
        db = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True)
        try:
            row = db.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return False
    return bool(row) and row[0] == FORMAT


def replay_store(path: str, view: Optional[ConsumerView] = None) -> tuple[ConsumerView, str]:
    """A listen store's batches and problems replayed into ``view`` (a new one by
    default), in the order they arrived; with the endpoint it listened to."""
    if not is_listen_store(path):
        raise ScenarioError("not a store urc listen --store wrote", path)
    view = view or ConsumerView()
    db = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True)
    try:
        endpoint = str(db.execute("SELECT value FROM meta WHERE name = 'endpoint'").fetchone()[0])
        problems = _problems(db)
        after, text = next(problems, (None, ""))
        for n, seq, payload in db.execute("SELECT n, seq, payload FROM batches ORDER BY n"):
            while after is not None and after <= n:
                view.problem(text)
                after, text = next(problems, (None, ""))
            _apply(view, seq, payload)
        while after is not None:
            view.problem(text)
            after, text = next(problems, (None, ""))
    except (sqlite3.Error, TypeError) as exc:
        raise ScenarioError(f"damaged listen store: {str(exc)[:200]}", path) from None
    finally:
        db.close()
    return view, endpoint


def _problems(db) -> Iterator[tuple[int, str]]:
    yield from db.execute("SELECT after, text FROM problems ORDER BY n").fetchall()


def _apply(view: ConsumerView, seq: int, payload) -> None:
    try:
        batch = wire.decode_batch(bytes(payload))
    except (msgspec.DecodeError, TypeError) as exc:
        view.problem(f"stored batch {seq} does not decode: {str(exc)[:200]}")
        return
    view.apply(seq, batch.ts, batch.events)

