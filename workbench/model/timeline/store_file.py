"""The store file (``urc run --store``): the SQLite connection, its checks and its encodings.

A node record travels with a key id in place of its key bytes, each key written once
(table ``keys``); every other value is written by ``store_codec`` (msgpack with declared
types, never pickle). A store is untrusted input once it leaves the run that wrote it:
it is opened read-only (no journal change, no WAL merge, nothing written beside it),
its tables and SQLite's quick check are verified before anything is shown, and a value
it cannot read is one line naming the store. The timeline on top of it is ``stored.py``.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, Optional
from urllib.parse import quote

from cache.basics.keys import TOKEN_BYTES, Namespace
from cache.observe.views import ComponentRecord, NodeRecord

from ..scenarios.scenario import ScenarioError
from .states import Records
from .store_codec import (MAX_INFLATED, BlobError, decode, decode_costed, encode, encode_plain,  # noqa: F401
                          make_record)  # (encode, encode_plain: the writer's)

FORMAT = 5  # 5: node records in the plain form, a step's token fields as bytes; 4: type marks heading arrays,
#             indexes of failing steps, kinds and names
READS = (4, 5)  # 4's node records are marked (each value's first byte says which form) and its steps hold
#                their token lists (a row one item shorter): both still read
CACHED_ROWS = 512  # decoded rows kept per column (a viewer steps around one place)
CHUNK_BYTES = 8 << 20  # a chunked read of rows stops past this many bytes
KEY_CACHE_BYTES = 64 << 20  # the reader's cache of node keys
QUICK_CHECK_MAX_BYTES = 1 << 30  # larger stores are checked value by value as they are read

_TABLES = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE keys (id INTEGER PRIMARY KEY, key BLOB NOT NULL);
CREATE TABLE steps (idx INTEGER PRIMARY KEY, passed INTEGER NOT NULL, delta BLOB NOT NULL, before BLOB NOT NULL,
                    globals BLOB NOT NULL, record BLOB NOT NULL);
CREATE INDEX failing ON steps (idx) WHERE passed = 0;
CREATE TABLE keyframes (idx INTEGER PRIMARY KEY, records BLOB NOT NULL);
CREATE TABLE touches (node INTEGER NOT NULL, idx INTEGER NOT NULL, PRIMARY KEY (node, idx)) WITHOUT ROWID;
CREATE TABLE series (first INTEGER PRIMARY KEY, rows BLOB NOT NULL);
CREATE TABLE kinds (code INTEGER NOT NULL, idx INTEGER NOT NULL, PRIMARY KEY (code, idx)) WITHOUT ROWID;
CREATE TABLE names (field TEXT NOT NULL, value TEXT NOT NULL, idx INTEGER NOT NULL,
                    PRIMARY KEY (field, value, idx)) WITHOUT ROWID;
"""
_COLUMNS = {"meta": ["name", "value"], "keys": ["id", "key"],
            "steps": ["idx", "passed", "delta", "before", "globals", "record"], "keyframes": ["idx", "records"],
            "touches": ["node", "idx"], "series": ["first", "rows"], "kinds": ["code", "idx"],
            "names": ["field", "value", "idx"]}
_STEP_COLUMNS = frozenset(_COLUMNS["steps"][2:])

_KEY = NodeRecord._fields.index("key")
_NAMESPACE = NodeRecord._fields.index("namespace")
_COMPONENTS = NodeRecord._fields.index("components")
_MIN_STEP_BYTES = 16  # a step's row on disk at the least: its number, a flag and four values
_DB_ERRORS = (sqlite3.Error, UnicodeDecodeError, OverflowError)  # a damaged schema's text, an id past 64 bits


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
        self._key_bytes = 0
        self._next_key = 1
        self.notices: list[str] = []  # what the reader should be told on opening (a recovered copy)
        self._scratch: Optional[tempfile.TemporaryDirectory] = None  # that copy's private folder

    @classmethod
    def create(cls, path: str) -> StoreFile:
        try:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA page_size = 16384")  # a step's row (~3 KB) fits one page: 8 % smaller, opened sooner
            db.execute("PRAGMA journal_mode = WAL")  # fast batches; ``seal`` turns it back before the file is shown
            db.execute("PRAGMA synchronous = NORMAL")  # a crash keeps every committed batch; power loss may cost the last
            db.execute("PRAGMA wal_autocheckpoint = 4096")  # pages: the log copied back (and synced) every 64 MB
            db.executescript(_TABLES)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write: {exc}", path) from None
        return cls(db, path)

    def seal(self) -> None:
        """The finished file alone, in rollback-journal mode: a reader needs no side file."""
        with self.lock:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.db.execute("PRAGMA journal_mode = DELETE")

    @classmethod
    def open(cls, path: str) -> StoreFile:
        """A store read-only, checked before anything is read from it; refused in one line.
        A finished store is read in place (``immutable``: SQLite writes nothing, not even
        beside it); one a run left unfinished, with its ``-wal`` or ``-journal`` beside it,
        is read from a private copy where SQLite may recover it (``recovered_copy``)."""
        if not os.path.isfile(path):
            raise StoreError("no such store", path)
        scratch, notices = None, []
        leftover = [side for side in ("-wal", "-journal") if os.path.lexists(path + side)]
        if leftover:
            scratch, readable, notices = recovered_copy(path, leftover)
            uri = f"file:{quote(readable)}"
        else:
            uri = f"file:{quote(os.path.abspath(path))}?mode=ro&immutable=1"
        try:
            db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA query_only = ON")
        except _DB_ERRORS as exc:
            if scratch is not None:
                scratch.cleanup()
            raise StoreError(f"cannot open: {exc}", path) from None
        store = cls(db, path)
        store.notices, store._scratch = notices, scratch
        try:
            _check(db, path)
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        with self.lock:
            self.db.close()
        if self._scratch is not None:
            self._scratch.cleanup()

    # ---- meta --------------------------------------------------------------------------------
    def put_meta(self, name: str, value: Any) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (name, encode(value)))

    def meta(self, name: str, default: Any = None) -> Any:
        row = self.read("SELECT CASE WHEN length(value) <= ? THEN value END FROM meta WHERE name = ?",
                        (MAX_INFLATED, name), f"meta {name}")
        return default if not row else self.decode(row[0][0], f"meta {name}")

    def decode(self, blob: Any, what: str) -> Any:
        """A value of this store, or one line saying which one it could not read."""
        return self.decode_costed(blob, what)[0]

    def decode_costed(self, blob: Any, what: str) -> tuple[Any, int]:
        """``decode`` and the value's estimated memory cost."""
        if not isinstance(blob, bytes):
            raise StoreError(f"damaged store: {what} is not a value this urc wrote", self.path)
        try:
            return decode_costed(blob)
        except BlobError as exc:
            raise StoreError(f"damaged store: {what}: {exc}", self.path) from None

    def read(self, sql: str, args: tuple = (), what: str = "a table") -> list:
        """Rows of a query; a damaged page is one line naming what was being read."""
        with self.lock:
            try:
                return self.db.execute(sql, args).fetchall()
            except _DB_ERRORS as exc:
                raise StoreError(f"damaged store: cannot read {what} ({exc})", self.path) from None

    def blobs(self, table: str, key: str, column: str, what: str) -> Iterator[tuple[Any, Any]]:
        """(key, value) of every row of ``table`` in key order, read in runs of at most
        ``CHUNK_BYTES`` (a few queries, not one a row; no run holds a damaged store's huge values)."""
        sizes = self.read(f"SELECT {key}, length({column}) FROM {table} ORDER BY {key}", (), what)
        for part in _parts(sizes, self.path, f"{table} row"):
            yield from self.read(f"SELECT {key}, {column} FROM {table} WHERE {key} BETWEEN ? AND ? ORDER BY {key}",
                                 (part[0], part[-1]), what)

    # ---- records and their keys ------------------------------------------------------------------
    def key_id(self, key: bytes) -> int:
        found = self._key_ids.get(key)
        if found is None:
            found = self._key_ids[key] = self._next_key
            self._next_key += 1
            self.db.execute("INSERT INTO keys VALUES (?, ?)", (found, key))
        return found

    @property
    def next_key(self) -> int:
        """The id the next new key gets (a transaction notes it, to forget on rollback)."""
        return self._next_key

    def forget_keys_from(self, first: int) -> None:
        """Forget the ids from ``first`` on: their rows were rolled back."""
        self._key_ids = {k: i for k, i in self._key_ids.items() if i < first}
        self._next_key = first

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
        keys = self._keys_for({fields[_KEY] for _, fields in packed
                               if fields is not None and len(fields) > _KEY and type(fields[_KEY]) is int})
        out: dict = {}
        for node_id, fields in packed:
            if fields is None:
                out[node_id] = None
                continue
            if len(fields) != len(NodeRecord._fields) or type(fields[_KEY]) is not int or fields[_KEY] not in keys:
                raise StoreError(f"damaged store: node {node_id}'s record is not as written", self.path)
            fields = list(fields)
            fields[_KEY] = keys[fields[_KEY]]
            try:
                _name_records(fields)
                out[node_id] = make_record(NodeRecord, fields)
            except BlobError as exc:
                raise StoreError(f"damaged store: node {node_id}: {exc}", self.path) from None
        return out

    def _keys_for(self, ids: set[int]) -> dict[int, bytes]:
        found = {i: self._keys[i] for i in ids if i in self._keys}
        missing = sorted(i for i in ids if i not in found)
        for start in range(0, len(missing), 500):
            chunk = tuple(missing[start:start + 500])
            marks = ",".join("?" * len(chunk))
            sizes = self.read(f"SELECT id, length(key) FROM keys WHERE id IN ({marks})", chunk, "the keys")
            for part in _parts(sizes, self.path, "key"):
                rows = self.read(f"SELECT id, key FROM keys WHERE id IN ({','.join('?' * len(part))})", part,
                                 "the keys")
                for key_id, key in rows:
                    if not isinstance(key, bytes) or len(key) % TOKEN_BYTES:
                        raise StoreError(f"damaged store: key {key_id} is not a key", self.path)
                    found[key_id] = self._keys[key_id] = key
                    self._key_bytes += len(key)
        while len(self._keys) > 8 * CACHED_ROWS or (self._key_bytes > KEY_CACHE_BYTES and self._keys):
            self._key_bytes -= len(self._keys.popitem(last=False)[1])
        return found

    def rows(self, column: str, first: int, last: int) -> list[tuple[int, bytes]]:
        """(index, blob) for steps first.. of one column, as many as fit ``CHUNK_BYTES``
        (at least one): a damaged store's huge values are never read together."""
        if column not in _STEP_COLUMNS:
            raise ValueError(column)
        sizes = self.read(f"SELECT idx, length({column}) FROM steps WHERE idx BETWEEN ? AND ? ORDER BY idx",
                          (first, last), f"steps {first}-{last}")
        if not sizes:
            return []
        part = next(_parts(sizes, self.path, f"{column} of step"))
        return self.read(f"SELECT idx, {column} FROM steps WHERE idx BETWEEN ? AND ? ORDER BY idx",
                         (part[0], part[-1]), f"steps {part[0]}-{part[-1]}")

    def steps(self) -> int:
        """How many steps it holds: numbered from 1, each on at least a few bytes of the
        files (a number past that is damage, not a run's length)."""
        # one aggregate per query: SQLite reads min and max off the key's ends only then
        # (both in one query scan every step: 0.6 s on a 10⁶-step store)
        first, last = self.read("SELECT coalesce((SELECT min(idx) FROM steps), 1), "
                                "coalesce((SELECT max(idx) FROM steps), 0)")[0]
        size = sum(os.path.getsize(self.path + side) for side in ("", "-wal") if os.path.isfile(self.path + side))
        if not (isinstance(last, int) and first == 1 and 0 <= last <= size // _MIN_STEP_BYTES):
            raise StoreError("damaged store: its steps are not numbered as written", self.path)
        return last


def _name_records(fields: list) -> None:
    """A node record's fields as the plain form reads them (``store_codec.encode_plain``),
    with the records inside named again: a namespace that is a tuple, and each component's
    tuple. The marked form (format 4) read them named already; anything else is left
    for ``make_record``'s checks to refuse."""
    namespace = fields[_NAMESPACE]
    if type(namespace) is tuple:
        fields[_NAMESPACE] = make_record(Namespace, namespace)
    components = fields[_COMPONENTS]
    if type(components) is tuple and any(type(c) is tuple for c in components):
        fields[_COMPONENTS] = tuple(make_record(ComponentRecord, c) if type(c) is tuple else c for c in components)


def _parts(sizes: list[tuple[Any, Any]], path: str, what: str) -> Iterator[tuple[int, ...]]:
    """Ids from (id, byte length) rows in runs of at most ``CHUNK_BYTES`` (one value
    alone may be larger, up to ``MAX_INFLATED``): no read takes a damaged store's
    huge values together."""
    part: list[int] = []
    total = 0
    for ident, size in sizes:
        if not isinstance(size, int) or size > MAX_INFLATED:
            raise StoreError(f"damaged store: the {what} {ident} is not a value this urc wrote", path)
        if part and total + size > CHUNK_BYTES:
            yield tuple(part)
            part, total = [], 0
        part.append(ident)
        total += size
    if part:
        yield tuple(part)


def _check(db: sqlite3.Connection, path: str) -> None:
    """Refuse, in one line, a file that is not a store of this format or is damaged:
    each table a table (a view could compute anything) with its columns, the format
    ours, and SQLite's quick check clean."""
    marks = ",".join("?" * len(_COLUMNS))
    try:
        kinds = dict(db.execute(f"SELECT name, type FROM sqlite_master WHERE name IN ({marks})", tuple(_COLUMNS)))
        tables = {name: [c[1] for c in db.execute(f"PRAGMA table_info({name})")] for name in _COLUMNS}
        row = db.execute("SELECT CASE WHEN typeof(value) = 'blob' AND length(value) <= 64 THEN value END "
                         "FROM meta WHERE name = 'format'").fetchone() if kinds.get("meta") == "table" else None
    except _DB_ERRORS as exc:
        raise StoreError(f"not a timeline store ({str(exc)[:120]})", path) from None
    try:
        found = decode(row[0]) if row and isinstance(row[0], bytes) else None
    except BlobError:
        found = None
    if found not in READS and _listened(db):
        raise StoreError("a KV event stream urc listen --store kept, not a run's timeline: open it with "
                         "urc tui --listen FILE", path)
    if found not in READS:
        older = " (or one an older urc wrote, which this one no longer reads: run the trace again)" if row else ""
        raise StoreError(f"not a timeline store this urc reads (formats {READS[0]}-{READS[-1]}){older}", path)
    for name, columns in _COLUMNS.items():
        if kinds.get(name) != "table" or tables[name] != columns:
            raise StoreError(f"damaged store: table {name} is missing or not as written", path)
    if os.path.getsize(path) <= QUICK_CHECK_MAX_BYTES:
        try:
            verdict = [r[0] for r in db.execute("PRAGMA quick_check(5)")]
        except _DB_ERRORS as exc:
            verdict = [str(exc)]
        if verdict != ["ok"]:
            raise StoreError(f"damaged store: SQLite's quick check says {'; '.join(map(str, verdict))[:200]}", path)


def _listened(db: sqlite3.Connection) -> bool:
    """A store ``urc listen --store`` wrote (kv_wire.store: its format is text)."""
    try:
        row = db.execute("SELECT value FROM meta WHERE name = 'format' AND typeof(value) = 'text'").fetchone()
    except _DB_ERRORS:
        return False
    return bool(row) and row[0] == "kv-listen-1"


def recovered_copy(path: str, leftover: list[str]) -> tuple[tempfile.TemporaryDirectory, str, list[str]]:
    """The store and the side file a run left beside it (``-wal``: batches not yet in
    the file; ``-journal``: a batch half-written), copied into a private folder, where
    opening it lets SQLite finish or undo that batch; the originals are never touched.
    Only regular files are copied; anything else beside it is left out and said."""
    scratch = tempfile.TemporaryDirectory(prefix="urc-store-")
    copy = os.path.join(scratch.name, "run.urcdb")
    notices = [f"{path}: a run stopped while writing it (its {' and '.join(leftover)} beside it): read from a "
               "private copy, as SQLite recovers it"]
    try:
        _copy_regular(path, copy, follow=True)  # the store the user named, through a link too
        for side in leftover:
            if not _copy_regular(path + side, copy + side, follow=False):
                notices.append(f"{path}{side} is not a regular file: left out")
    except OSError as exc:
        scratch.cleanup()
        raise StoreError(f"cannot read: {exc.strerror or exc}", path) from None
    return scratch, copy, notices


def _copy_regular(source: str, target: str, follow: bool) -> bool:
    """Copy ``source`` if it is a regular file (through a link only where ``follow``);
    False where it is not."""
    flags = os.O_RDONLY | (0 if follow else os.O_NOFOLLOW) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(source, flags)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            return False
        with open(target, "wb") as out:
            shutil.copyfileobj(stream, out, 1 << 20)
    return True
