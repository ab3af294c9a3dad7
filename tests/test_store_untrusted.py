"""A store (``urc run --store``) is untrusted once it leaves the run that wrote it:
opening one never runs code, never changes a file, stays within bounded memory, and
refuses a damaged or foreign file in one line (exit 2)."""

from __future__ import annotations

import os
import pickle
import sqlite3
import stat
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.model.timeline import store_codec
from workbench.model.timeline.store_run import run_to_store
from workbench.model.timeline.stored import StoreError, open_store

ROOT = Path(__file__).resolve().parent.parent
SMOKE = str(ROOT / "scenarios" / "smoke.toml")


@pytest.fixture
def store(tmp_path) -> Path:
    path = tmp_path / "run.urcdb"
    run_to_store(SMOKE, str(path)).close()
    return path


def snapshot_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def show(path: Path, capsys, *extra: str) -> tuple[int, str]:
    code = main(["show", str(path), *extra])
    return code, capsys.readouterr().err


def set_meta(path: Path, name: str, value: bytes) -> None:
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = ? WHERE name = ?", (value, name))
    db.close()


class _Payload:
    """Unpickling this writes a file: what a crafted store would do to its reader."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


def test_a_pickle_in_a_store_is_never_run(store, tmp_path, capsys):
    marker = tmp_path / "ran.txt"
    set_meta(store, "format", pickle.dumps(_Payload(marker)))
    code, err = show(store, capsys)
    assert code == 2 and not marker.exists()
    assert "not a timeline store this urc reads" in err and len(err.strip().splitlines()) == 1
    set_meta(store, "format", store_codec.encode(3))  # the format is right, a value is a pickle
    set_meta(store, "shape", pickle.dumps(_Payload(marker)))
    code, err = show(store, capsys)
    assert code == 2 and not marker.exists() and "damaged store: meta shape" in err


def test_the_codec_builds_only_declared_types():
    import msgpack

    sneaky = msgpack.ExtType(40, msgpack.packb(["os.system", "true"]))
    with pytest.raises(store_codec.BlobError, match="malformed extension"):
        store_codec.decode(b"m" + msgpack.packb([sneaky]))
    with pytest.raises(TypeError, match="cannot hold"):
        store_codec.encode(object())
    record = store_codec.RECORDS.index(store_codec.Violation) + 16
    wrong = msgpack.ExtType(record, msgpack.packb([1, "message"]))  # name must be a str
    with pytest.raises(store_codec.BlobError, match="Violation whose name is a int"):
        store_codec.decode(b"m" + msgpack.packb(wrong))


def test_a_compressed_bomb_is_refused_within_bounded_memory(store, tmp_path):
    squeeze, zeros = zlib.compressobj(9), bytes(1 << 20)
    bomb = b"".join(squeeze.compress(zeros) for _ in range(1024)) + squeeze.flush()  # 1 GiB from ~1 MB
    set_meta(store, "shape", b"z" + bomb)
    child = subprocess.run([sys.executable, "-c", (  # the peak read from /proc: getrusage's survives exec
        "import re\n"
        "from workbench.cli import main\n"
        f"code = main(['show', {str(store)!r}])\n"
        "status = open('/proc/self/status').read()\n"
        "print(code, int(re.search(r'VmHWM:\\s+(\\d+)', status).group(1)) // 1024)\n")],
        capture_output=True, text=True, cwd=ROOT)
    code, peak_mb = map(int, child.stdout.split())
    assert code == 2 and "inflates past" in child.stderr
    assert peak_mb < 200, f"peak {peak_mb} MB"


def test_many_small_objects_are_refused_by_their_cost():
    import msgpack

    body = msgpack.packb([[]] * (store_codec.MAX_INFLATED // 2))  # a list of empty lists: ~72x its bytes
    assert len(body) > store_codec.FAST_BODY
    with pytest.raises(store_codec.BlobError, match="objects would take over"):
        store_codec.decode(b"m" + body)


def test_reading_changes_no_file(store, tmp_path, capsys):
    before = snapshot_files(tmp_path)
    assert show(store, capsys)[0] == 0
    assert main(["why", str(store), "--step", "1"]) in (0, 1, 2)
    capsys.readouterr()
    assert snapshot_files(tmp_path) == before


def test_an_empty_or_foreign_file_is_refused_and_left_as_it_was(tmp_path, capsys):
    empty = tmp_path / "empty.urcdb"
    empty.write_bytes(b"")
    code, err = show(empty, capsys)
    assert code == 2 and "not a timeline store" in err and empty.read_bytes() == b""
    foreign = tmp_path / "other.urcdb"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE t (x)")
        db.execute("INSERT INTO t VALUES (1)")
    db.close()
    before = foreign.read_bytes()
    code, err = show(foreign, capsys)
    assert code == 2 and "not a timeline store" in err
    assert foreign.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["empty.urcdb",
                                                                                             "other.urcdb"]


def test_a_read_only_store_is_shown(store, capsys):
    store.chmod(stat.S_IRUSR | stat.S_IRGRP)
    store.parent.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        code, err = show(store, capsys, "--step", "2")
    finally:
        store.parent.chmod(stat.S_IRWXU)
        store.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert code == 0, err


def test_a_leftover_wal_is_read_never_merged(tmp_path, capsys):
    path = tmp_path / "run.urcdb"
    timeline = run_to_store(SMOKE, str(path))  # still open: a WAL beside it, as a run that died leaves
    file = timeline.store.file
    file.db.execute("PRAGMA journal_mode = WAL")
    file.db.execute("BEGIN")
    file.put_meta("notices", ["from the WAL"])
    file.db.execute("COMMIT")
    os.link(path.with_name("run.urcdb-wal"), tmp_path / "wal.copy")  # keeps the WAL's bytes past the writer
    wal_bytes = (tmp_path / "wal.copy").read_bytes()
    main_bytes = path.read_bytes()
    reopened = open_store(str(path))
    assert "from the WAL" in reopened.scenario.notices
    reopened.close()
    assert path.read_bytes() == main_bytes and path.with_name("run.urcdb-wal").read_bytes() == wal_bytes
    timeline.close()


def test_random_bytes_in_the_middle_are_refused(store, capsys):
    data = bytearray(store.read_bytes())
    middle = len(data) // 2 // 4096 * 4096
    data[middle:middle + 4096] = os.urandom(4096)
    store.write_bytes(bytes(data))
    code, err = show(store, capsys)
    assert code == 2 and "damaged store" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("damage", [
    "UPDATE meta SET value = x'7a00ff' WHERE name = 'header'",
    "UPDATE steps SET record = x'6d91c0' WHERE idx = 1",
    "UPDATE steps SET delta = randomblob(64) WHERE idx = 1",
    "UPDATE keyframes SET records = x'6d01' WHERE idx = 0",
    "DROP TABLE touches",
    "DELETE FROM keys",
    "UPDATE series SET rows = x'00' WHERE first = 0",
])
def test_damaged_values_are_one_line_and_exit_2(store, capsys, damage):
    with sqlite3.connect(store) as db:
        db.execute(damage)
    db.close()
    for command in (["show", str(store), "--step", "1"], ["show", str(store), "--walk"], ["plot", str(store),
                                                                                          "-o", "-"]):
        code = main(command)
        err = capsys.readouterr().err
        if code == 0:
            continue  # this command never reads the damaged value
        assert code == 2, err
        assert "damaged store" in err and "internal error" not in err and len(err.strip().splitlines()) == 1


def test_a_failed_run_leaves_the_store_it_would_replace(store, tmp_path, capsys):
    before = (store.read_bytes(), store.stat().st_ino)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"schema": 1, "scenario": {"name": "t"}, "config": {"components": ["full"], "kv_size": 64}}\n'
                   '{"op": "insert", "key": [1, 2]}\n{"op": "match", "key": [1, 2\n')
    code = main(["run", str(bad), "--store", str(store), "--force"])
    assert code == 2 and "bad.jsonl:3" in capsys.readouterr().err
    assert (store.read_bytes(), store.stat().st_ino) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "run.urcdb"]  # nothing left beside it
    good = tmp_path / "good.jsonl"
    good.write_text(bad.read_text().splitlines(keepends=True)[0] + '{"op": "insert", "key": [1, 2]}\n')
    assert main(["run", str(good), "--store", str(store), "--force"]) == 0
    assert len(open_store(str(store))) == 1 and store.stat().st_ino != before[1]


def test_an_older_pickled_store_is_refused_with_a_hint(store, capsys):
    set_meta(store, "format", zlib.compress(pickle.dumps(2, 5), 1))
    code, err = show(store, capsys)
    assert code == 2 and "run the trace again" in err
    with pytest.raises(StoreError):
        open_store(str(store))


def test_the_workbench_says_a_damaged_step_and_stays_where_it_was(store):
    import asyncio

    from workbench.tui.app import WorkbenchApp

    with sqlite3.connect(store) as db:
        db.execute("UPDATE steps SET delta = x'6d01' WHERE idx = 2")
    db.close()

    async def drive():
        app = WorkbenchApp([open_store(str(store))])
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("home")
            await pilot.pause()
            app.cursor.go(0)
            app.refresh_view()
            await pilot.press("n")
            assert app.cursor.step == 1
            await pilot.press("n")  # step 2's delta is damaged
            await pilot.pause()
            assert app.cursor.step == 1 and app.is_running
            said = [n.message for n in app._notifications]
            assert any("damaged store" in text for text in said), said

    asyncio.run(drive())
