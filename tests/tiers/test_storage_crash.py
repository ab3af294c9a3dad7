"""Issue 29's "Done when" for the file backend: a process killed mid-write never leaves a
torn page that is served. A writer subprocess SIGKILLs itself at each point of the write
(``WRITE_POINTS``); a fresh backend on the directory must serve only pages that verify,
the killed key absent or complete, and no temp file. Hand-made damage (truncation, a
flipped byte, a file under the wrong name) reads as a miss, never as bytes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cache.tiers.backends import FileBackend
from cache.tiers.backends.file import WRITE_POINTS, decode_page, encode_page
from cache.tiers.backends.owned_dir import MARKER

ROOT = Path(__file__).resolve().parents[2]
SURVIVORS = {f"done{i}": bytes([i]) * 4096 for i in range(3)}
KILLED_KEY, KILLED_PAGE = "victim", bytes(range(256)) * 64

WRITER = """
import os, signal, sys
from cache.tiers.backends import FileBackend

path, point = sys.argv[1], sys.argv[2]
survivors = {f"done{i}": bytes([i]) * 4096 for i in range(3)}

def crash(at, key):
    if at == point and key == "victim":
        os.kill(os.getpid(), signal.SIGKILL)

store = FileBackend(path, budget=1 << 20, write_hook=crash)
assert store.set(list(survivors), list(survivors.values())) == [True] * 3
store.set(["victim"], [bytes(range(256)) * 64])
print("not killed")
"""


@pytest.fixture
def store_dir(tmp_path):
    """The backend's directory: absent, so the first backend creates it with its marker."""
    return tmp_path / "store"


def run_killed_writer(path: Path, point: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WRITER, str(path), point], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


@pytest.mark.parametrize("point", WRITE_POINTS)
def test_a_write_killed_at_any_point_never_serves_a_torn_page(store_dir, point):
    done = run_killed_writer(store_dir, point)
    assert done.returncode == -signal.SIGKILL, done.stderr
    left = os.listdir(store_dir)
    if point != "after_rename":
        assert any(name.endswith(".tmp") for name in left)  # the kill really left a partial write

    fresh = FileBackend(str(store_dir))
    assert not [name for name in os.listdir(store_dir) if name.endswith(".tmp")]
    assert fresh.get(list(SURVIVORS)) == list(SURVIVORS.values())
    assert fresh.get([KILLED_KEY])[0] in (None, KILLED_PAGE)
    if point == "after_rename":
        assert fresh.get([KILLED_KEY]) == [KILLED_PAGE]  # renamed: complete, and kept
    else:
        assert fresh.stored_keys() == sorted(SURVIVORS)
        assert fresh.removed_temps == 1
    for name in set(os.listdir(store_dir)) - {MARKER}:  # every file left verifies under its own name
        key = name[:-len(".bin")]
        assert decode_page(key, (store_dir / name).read_bytes()) is not None


def test_without_a_kill_the_writer_completes(store_dir):
    """The control: the same writer with no matching point stores every page."""
    done = run_killed_writer(store_dir, "nowhere")
    assert done.returncode == 0 and "not killed" in done.stdout, done.stderr
    assert FileBackend(str(store_dir)).get([KILLED_KEY]) == [KILLED_PAGE]


@pytest.fixture
def stored(store_dir):
    store = FileBackend(str(store_dir), budget=1 << 20)
    store.set(["good", "bad"], [b"g" * 100, b"b" * 100])
    return store, store_dir / "bad.bin"


def _damage_then_read(store, path, damage):
    data = path.read_bytes()
    path.write_bytes(damage(data))
    return store.get(["bad", "good"])


@pytest.mark.parametrize("damage", [
    lambda data: data[:-1],  # truncated payload
    lambda data: data[:10],  # truncated header
    lambda data: b"",  # zero length (a power loss after the rename)
    lambda data: data[:-1] + bytes([data[-1] ^ 1]),  # one flipped payload bit
    lambda data: data + b"x",  # trailing bytes
    lambda data: b"XXXX" + data[4:],  # wrong magic
], ids=["short-payload", "short-header", "empty", "flipped-bit", "trailing", "magic"])
def test_a_damaged_file_is_a_miss_and_is_removed(stored, damage):
    store, path = stored
    assert _damage_then_read(store, path, damage) == [None, b"g" * 100]
    assert not path.exists() and store.stored_keys() == ["good"]
    assert store.stats()["removed_bad"] == 1 and store.stats()["bytes"] == 100


def test_a_page_under_another_keys_name_is_a_miss(stored):
    store, path = stored
    path.write_bytes(encode_page("good", b"g" * 100))  # a valid page, but for another key
    assert store.get(["bad"]) == [None]


@pytest.mark.parametrize("damage", [lambda data: data[:-3], lambda data: b"", lambda data: b"JUNK" + data[4:]])
def test_the_startup_scan_removes_bad_files_and_keeps_good_ones(stored, damage):
    store, path = stored
    path.write_bytes(damage(path.read_bytes()))
    (path.parent / ".abc123.tmp").write_bytes(b"half a page")
    (path.parent / "notes.txt").write_text("not ours")
    fresh = FileBackend(str(path.parent))
    assert fresh.stored_keys() == ["good"] and fresh.get(["good"]) == [b"g" * 100]
    assert (fresh.removed_bad, fresh.removed_temps) == (1, 1)
    assert sorted(os.listdir(path.parent)) == [MARKER, "good.bin", "notes.txt"]  # not ours: left alone


def test_a_crc_failure_the_scan_cannot_see_is_caught_by_the_read(stored):
    """The scan checks header and length only (no full read); a flipped payload byte
    survives it and is caught by the crc on the first read."""
    store, path = stored
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    fresh = FileBackend(str(path.parent))
    assert "bad" in fresh.stored_keys()
    assert fresh.get(["bad"]) == [None] and fresh.stored_keys() == ["good"]


def test_a_failed_write_leaves_nothing_and_gives_its_bytes_back(store_dir):
    def disk_full(point, key):
        if point == "before_rename":
            raise OSError(28, "No space left on device")

    store = FileBackend(str(store_dir), budget=1000, write_hook=disk_full)
    assert store.set(["a"], [b"x" * 10]) == [False]
    assert os.listdir(store_dir) == [MARKER] and store.stats()["bytes"] == 0 and store.lru.order() == []


def test_a_set_over_a_bad_untracked_file_writes_a_good_one(store_dir):
    store = FileBackend(str(store_dir))
    (store_dir / "late.bin").write_bytes(b"garbage that arrived after the scan")
    (store_dir / "copied.bin").write_bytes(encode_page("copied", b"c" * 8))
    assert store.set(["late", "copied"], [b"l" * 8, b"other"]) == [True, True]
    assert store.get(["late", "copied"]) == [b"l" * 8, b"c" * 8]  # a good file is kept, not rewritten
    assert store.stats()["bytes"] == 16


def test_an_unreadable_page_is_a_miss_not_an_error(store_dir):
    store = FileBackend(str(store_dir))
    (store_dir / "odd.bin").mkdir()
    assert store.get(["odd"]) == [None]
    assert store.exists_prefix(["odd"]) == 0 and store.stored_keys() == []
