"""The embedded default storage backend: one file per page in a directory.

It behaves as SGLang 0.5.23's ``file`` backend (``HiCacheFile`` with its
``LRUFileEvictor``): ``<key>.bin`` per page, a ``set`` of a stored key only refreshes
its recency, an optional byte budget evicts least-recently-used files (budget.py), a
restart keeps the store and orders it by modification time. Unlike SGLang it is crash-
safe, so no torn page is ever served:

- a page is written to ``.<random>.tmp`` in the same directory, flushed and fsynced,
  renamed onto ``<key>.bin`` (atomic), and the directory is fsynced so the rename lasts;
- every file starts with a header (magic, version, the key, payload length, crc32 of the
  payload) that ``get`` verifies; a short, corrupt or misnamed file is a miss and is
  removed, never bytes;
- opening a directory removes stray temp files (a write killed before its rename) and
  ``.bin`` files whose header or length is wrong; the crc is checked on each read.

The directory belongs to the backend (as SGLang's, whose ``clear`` empties it): a ``.bin``
that is not ours fails the header check and is removed. So it must be one the backend
created, with its marker (owned_dir.py): any other directory, a symlink in the path or a
missing parent is refused (StorageDirError) before anything is read, written or removed.

``write_hook(point, key)`` is a test seam: it is called at each of ``WRITE_POINTS`` so a
test can kill the process mid-write and check what a fresh backend serves.
"""

from __future__ import annotations

import os
import struct
import uuid
import zlib
from collections.abc import Sequence
from typing import Callable, Optional

from .backend import check_batch
from .budget import DEFAULT_EVICTION_RATIO, LruBudget
from .owned_dir import check_owned, claim

MAGIC = b"URCP"
VERSION = 1
# magic, version, key length, payload length, crc32 of the payload; the key's bytes follow
_FIXED = struct.Struct("<4sHHQI")
SUFFIX = ".bin"
TEMP_PREFIX, TEMP_SUFFIX = ".", ".tmp"
MAX_KEY_BYTES = 200  # "<key>.bin" must stay a legal file name (255 bytes)
WRITE_POINTS = ("half_written", "before_rename", "after_rename")


def header_size(key: str) -> int:
    return _FIXED.size + len(key.encode())


def encode_page(key: str, payload: bytes) -> bytes:
    """The file's bytes: the header, then the page."""
    raw_key = key.encode()
    return _FIXED.pack(MAGIC, VERSION, len(raw_key), len(payload), zlib.crc32(payload)) + raw_key + payload


def _read_header(key: str, head: bytes) -> Optional[tuple[int, int]]:
    """(payload length, crc) when ``head`` is a valid header for ``key``, else None."""
    raw_key = key.encode()
    if len(head) < _FIXED.size + len(raw_key):
        return None
    magic, version, key_len, length, crc = _FIXED.unpack_from(head)
    if magic != MAGIC or version != VERSION or key_len != len(raw_key):
        return None
    if head[_FIXED.size:_FIXED.size + key_len] != raw_key:
        return None
    return length, crc


def decode_page(key: str, data: bytes) -> Optional[bytes]:
    """The page stored in ``data`` for ``key``, or None if anything does not verify."""
    header = _read_header(key, data)
    if header is None:
        return None
    length, crc = header
    start = header_size(key)
    payload = data[start:]
    if len(payload) != length or zlib.crc32(payload) != crc:
        return None
    return payload


def check_key(key: str) -> None:
    """A key becomes a file name: refuse what could escape the directory or look like a temp."""
    if not isinstance(key, str) or not key or key.startswith(TEMP_PREFIX) or "/" in key \
            or "\\" in key or "\0" in key or len(key.encode()) > MAX_KEY_BYTES:
        raise ValueError(f"not a storage key: {key!r} (non-empty, no '/', '\\', NUL or leading '.',"
                         f" at most {MAX_KEY_BYTES} bytes)")


def _is_key(name: str) -> bool:
    try:
        check_key(name)
    except ValueError:
        return False
    return True


def _is_temp(name: str) -> bool:
    return name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)


class FileBackend:
    """Pages as verified files in ``path``; see the module docstring for the guarantees."""

    name = "file"

    def __init__(self, path: str, budget: Optional[int] = None,
                 eviction_ratio: float = DEFAULT_EVICTION_RATIO,
                 write_hook: Optional[Callable[[str, str], None]] = None) -> None:
        self.path = claim(path)
        self.write_hook = write_hook
        self.lru = LruBudget(budget, eviction_ratio, drop=self._unlink)
        self.removed_temps = 0  # stray temp files removed by the startup scan
        self.removed_bad = 0  # .bin files removed because they did not verify
        self._scan()

    # -- paths and the startup scan ------------------------------------------------

    def _file(self, key: str) -> str:
        return os.path.join(self.path, key + SUFFIX)

    def _scan(self) -> None:
        """Drop temps and bad files, adopt good ones oldest-mtime first (SGLang's order;
        ties by key so a restart is deterministic), then evict if over the budget."""
        found = []
        for entry in os.scandir(self.path):
            if not entry.is_file(follow_symlinks=False):
                continue
            if _is_temp(entry.name):
                self._remove(entry.path)
                self.removed_temps += 1
            elif entry.name.endswith(SUFFIX) and _is_key(entry.name[:-len(SUFFIX)]):
                key = entry.name[:-len(SUFFIX)]
                length = self._verified_length(key, entry.path)
                if length is None:
                    self._remove(entry.path)
                    self.removed_bad += 1
                else:
                    found.append((entry.stat().st_mtime_ns, key, length))
        for _, key, length in sorted(found):
            self.lru.adopt(key, length)
        self.lru.settle()

    def _verified_length(self, key: str, path: str) -> Optional[int]:
        """The payload length if the header is ``key``'s and the size matches (no crc:
        that costs a full read, and every ``get`` checks it)."""
        try:
            with open(path, "rb") as f:
                head = f.read(header_size(key))
                size = os.fstat(f.fileno()).st_size
        except OSError:
            return None
        header = _read_header(key, head)
        if header is None or size != header_size(key) + header[0]:
            return None
        return header[0]

    # -- the protocol ---------------------------------------------------------------

    def exists_prefix(self, keys: Sequence[str]) -> int:
        """Leading keys whose file is there (as SGLang, existence is not verification:
        a bad file is found, and removed, by the ``get`` that reads it)."""
        for count, key in enumerate(keys):
            check_key(key)
            if not os.path.isfile(self._file(key)):
                return count
        return len(keys)

    def exists_each(self, keys: Sequence[str]) -> list[bool]:
        for key in keys:
            check_key(key)
        return [os.path.isfile(self._file(key)) for key in keys]

    def get(self, keys: Sequence[str]) -> list[Optional[bytes]]:
        out = []
        for key in keys:
            check_key(key)
            out.append(self._read(key))
        return out

    def _read(self, key: str) -> Optional[bytes]:
        path = self._file(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            self.lru.forget(key)
            return None
        except OSError:  # unreadable (a directory in its place, permissions): a miss
            return None
        page = decode_page(key, data)
        if page is None:  # torn, corrupt or someone else's: a miss, and gone
            self._remove(path)
            self.removed_bad += 1
            self.lru.forget(key)
            return None
        if key not in self.lru:  # a file that arrived behind our back
            self.lru.adopt(key, len(page))
        self.lru.touch(key)
        return page

    def set(self, keys: Sequence[str], pages: Sequence[bytes]) -> list[bool]:
        check_batch(keys, pages)
        return [self._store(key, bytes(page)) for key, page in zip(keys, pages)]

    def _store(self, key: str, page: bytes) -> bool:
        check_key(key)
        path = self._file(key)
        if os.path.isfile(path):  # content-addressed: never rewritten
            if key in self.lru:
                self.lru.touch(key)
                return True
            length = self._verified_length(key, path)  # a file that arrived behind our back
            if length is not None:
                self.lru.adopt(key, length)
                return True
            self._remove(path)
            self.removed_bad += 1
        if not self.lru.reserve(key, len(page)):
            return False
        temp = os.path.join(self.path, f"{TEMP_PREFIX}{uuid.uuid4().hex}{TEMP_SUFFIX}")
        try:
            self._write(key, temp, path, encode_page(key, page))
        except OSError:
            self.lru.abort(key)
            self._remove(temp)
            return False
        self.lru.commit(key)
        return True

    def _write(self, key: str, temp: str, path: str, blob: bytes) -> None:
        """Temp file, fsync, atomic rename, fsync the directory: a kill at any point
        leaves either no ``<key>.bin`` or a complete one."""
        hook = self.write_hook or (lambda point, key: None)
        with open(temp, "xb") as f:
            half = header_size(key) + (len(blob) - header_size(key)) // 2
            f.write(blob[:half])
            f.flush()
            hook("half_written", key)
            f.write(blob[half:])
            f.flush()
            os.fsync(f.fileno())
        hook("before_rename", key)
        os.replace(temp, path)
        hook("after_rename", key)
        self._fsync_dir()

    def _fsync_dir(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def stored_keys(self) -> list[str]:
        return sorted(entry.name[:-len(SUFFIX)] for entry in os.scandir(self.path)
                      if entry.name.endswith(SUFFIX) and _is_key(entry.name[:-len(SUFFIX)])
                      and entry.is_file(follow_symlinks=False))

    def clear(self) -> None:
        """Remove our files (pages and temps); anything else in the directory stays."""
        check_owned(self.path)
        for name in os.listdir(self.path):
            if name.endswith(SUFFIX) or _is_temp(name):
                self._remove(os.path.join(self.path, name))
        self.lru.clear()

    def stats(self) -> dict:
        return {"backend": self.name, **self.lru.stats(),
                "removed_temps": self.removed_temps, "removed_bad": self.removed_bad}

    # -- removal --------------------------------------------------------------------

    def _unlink(self, key: str) -> None:
        """Eviction's drop: a file already gone is fine; any other OSError keeps the page."""
        try:
            os.remove(self._file(key))
        except FileNotFoundError:
            pass

    @staticmethod
    def _remove(path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
