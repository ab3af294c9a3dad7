"""The store file (``urc run --store``): the SQLite connection and its encodings.

A node record travels with a key id in place of its key bytes, each key written once
(table ``keys``); everything else is pickled with the snapshots' read-only mappings as
plain dicts, and compressed where that pays. The timeline on top of it is ``stored.py``.
"""

from __future__ import annotations

import copyreg
import io
import os
import pickle
import sqlite3
import threading
import zlib
from collections import OrderedDict
from types import MappingProxyType
from typing import Any

from cache.snapshot import NodeRecord

from ..scenarios.scenario import ScenarioError
from .states import Records

FORMAT = 2  # 2: the charts' rows (table series)
CACHED_ROWS = 512  # decoded rows kept per column (a viewer steps around one place)

_TABLES = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE keys (id INTEGER PRIMARY KEY, key BLOB NOT NULL);
CREATE TABLE steps (idx INTEGER PRIMARY KEY, passed INTEGER NOT NULL, delta BLOB NOT NULL, before BLOB NOT NULL,
                    globals BLOB NOT NULL, record BLOB NOT NULL);
CREATE TABLE keyframes (idx INTEGER PRIMARY KEY, records BLOB NOT NULL);
CREATE TABLE touches (node INTEGER NOT NULL, idx INTEGER NOT NULL, PRIMARY KEY (node, idx)) WITHOUT ROWID;
CREATE TABLE series (first INTEGER PRIMARY KEY, rows BLOB NOT NULL);
"""

_KEY = NodeRecord._fields.index("key")


def _proxy(mapping: dict) -> MappingProxyType:
    return MappingProxyType(mapping)


_DISPATCH = copyreg.dispatch_table.copy()
_DISPATCH[MappingProxyType] = lambda m: (_proxy, (dict(m),))  # snapshots wrap their mappings read-only


def encode(obj: Any, compress: bool = True) -> bytes:
    """Pickled, and compressed unless told not to (a step's record is mostly token ids,
    which do not compress: a third of the run's time went to trying)."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, 5)
    pickler.dispatch_table = _DISPATCH
    pickler.dump(obj)
    return zlib.compress(out.getvalue(), 1) if compress else out.getvalue()


def decode(blob: bytes) -> Any:
    return pickle.loads(blob if blob[:1] == b"\x80" else zlib.decompress(blob))  # a pickle starts with PROTO


class StoreError(ScenarioError):
    """A store that cannot be opened or written (one line: the file and why)."""


# ---- the file ----------------------------------------------------------------------------------------


class StoreFile:
    """The SQLite file and its encodings: node records travel with a key id in place
    of their key bytes, each key written once (``key_id``)."""

    def __init__(self, connection: sqlite3.Connection, path: str) -> None:
        self.db = connection
        self.path = path
        self.lock = threading.RLock()  # a viewer's worker thread and the UI read through one connection
        self._key_ids: dict[bytes, int] = {}  # writer: key bytes -> id, for keys the live tree still uses
        self._keys: OrderedDict[int, bytes] = OrderedDict()  # reader: id -> key bytes, most recent last
        self._next_key = 1

    @classmethod
    def create(cls, path: str) -> StoreFile:
        db = _connect(path)
        db.executescript(_TABLES)
        return cls(db, path)

    @classmethod
    def open(cls, path: str) -> StoreFile:
        if not os.path.isfile(path):
            raise StoreError("no such store", path)
        db = _connect(path)
        try:
            found = db.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
        except sqlite3.DatabaseError:
            found = None
        if found is None or decode(found[0]) != FORMAT:
            db.close()
            raise StoreError(f"not a timeline store this urc reads (format {FORMAT}): write it with urc run TRACE --store", path)
        store = cls(db, path)
        store._next_key = (db.execute("SELECT max(id) FROM keys").fetchone()[0] or 0) + 1
        return store

    # ---- meta --------------------------------------------------------------------------------
    def put_meta(self, name: str, value: Any) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (name, encode(value)))

    def meta(self, name: str, default: Any = None) -> Any:
        with self.lock:
            row = self.db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return default if row is None else decode(row[0])

    # ---- records and their keys ------------------------------------------------------------------
    def key_id(self, key: bytes) -> int:
        found = self._key_ids.get(key)
        if found is None:
            found = self._key_ids[key] = self._next_key
            self._next_key += 1
            self.db.execute("INSERT INTO keys VALUES (?, ?)", (found, key))
        return found

    def forget_keys(self, live: Records) -> None:
        """Keep ids only for the keys ``live`` uses (a later record of a deleted node's
        key, should one come, just stores it again)."""
        keep = {r.key for r in live.values()}
        self._key_ids = {k: i for k, i in self._key_ids.items() if k in keep}

    def pack(self, records: dict) -> list:
        """``{id: record or None}`` as plain tuples with a key id in place of the key."""
        out = []
        for node_id, record in records.items():
            if record is None:
                out.append((node_id, None))
            else:
                fields = list(record)
                fields[_KEY] = self.key_id(record.key)
                out.append((node_id, tuple(fields)))
        return out

    def unpack(self, packed: list) -> dict:
        keys = self._keys_for({fields[_KEY] for _, fields in packed if fields is not None})
        out: dict = {}
        for node_id, fields in packed:
            if fields is None:
                out[node_id] = None
            else:
                fields = list(fields)
                fields[_KEY] = keys[fields[_KEY]]
                out[node_id] = NodeRecord._make(fields)
        return out

    def _keys_for(self, ids: set[int]) -> dict[int, bytes]:
        found = {i: self._keys[i] for i in ids if i in self._keys}
        missing = [i for i in ids if i not in found]
        for start in range(0, len(missing), 500):
            chunk = missing[start:start + 500]
            with self.lock:
                rows = self.db.execute(f"SELECT id, key FROM keys WHERE id IN ({','.join('?' * len(chunk))})",
                                       chunk).fetchall()
            for key_id, key in rows:
                found[key_id] = self._keys[key_id] = bytes(key)
        while len(self._keys) > 8 * CACHED_ROWS:
            self._keys.popitem(last=False)
        return found

    def rows(self, column: str, first: int, last: int) -> list[tuple[int, bytes]]:
        """(index, blob) for steps first..last of one column."""
        with self.lock:
            return self.db.execute(f"SELECT idx, {column} FROM steps WHERE idx BETWEEN ? AND ? ORDER BY idx",
                                   (first, last)).fetchall()

    def steps(self) -> int:
        with self.lock:
            return self.db.execute("SELECT coalesce(max(idx), 0) FROM steps").fetchone()[0]


def _connect(path: str) -> sqlite3.Connection:
    try:
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode = WAL")  # a reader sees the last committed batch while a run writes
        db.execute("PRAGMA synchronous = NORMAL")  # a crash keeps every committed batch; power loss may cost the last
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open: {exc}", path) from None
    return db
