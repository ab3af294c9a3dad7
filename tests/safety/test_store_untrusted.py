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

from cache.observe.views import NodeRecord
from workbench.cli import main
from workbench.model.timeline import store_codec
from workbench.model.timeline.store_run import run_to_store
from workbench.model.timeline.store_file import FORMAT
from workbench.model.timeline.stored import StoreError, open_store

ROOT = Path(__file__).resolve().parents[2]
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
    set_meta(store, "format", store_codec.encode(FORMAT))  # the format is right, a value is a pickle
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
    wrong = [msgpack.ExtType(record, b""), 1, "message"]  # name must be a str
    with pytest.raises(store_codec.BlobError, match="Violation whose name is not as declared"):
        store_codec.decode(b"m" + msgpack.packb(wrong))
    with pytest.raises(store_codec.BlobError, match="malformed extension"):  # a record's fields inside its mark
        store_codec.decode(b"m" + msgpack.packb(msgpack.ExtType(record, msgpack.packb(["name", "message"]))))


def test_the_plain_form_holds_plain_values_only():
    """Node records' form: arrays read as tuples, no type mark; an int past 64 bits is
    its one extension, as in the marked form."""
    import msgpack

    assert store_codec.decode(b"p" + msgpack.packb([[1, 2], None, "x"])) == ((1, 2), None, "x")
    with pytest.raises(store_codec.BlobError, match="malformed plain value"):
        store_codec.decode(b"p" + msgpack.packb([msgpack.ExtType(1, b""), 1]))  # a tuple's mark
    with pytest.raises(TypeError, match="only plain values"):
        store_codec.encode_plain((1, object()))
    big = 1 << 80
    assert store_codec.decode(store_codec.encode_plain((big, -big))) == (big, -big)


def test_a_damaged_plain_node_record_is_one_line(store, capsys):
    """A step's node records, written plain, with a component or a namespace that is no
    record of its kind: the record's own checks refuse it (a named tuple's fields are
    checked against their annotations too), in one line naming the node."""
    with sqlite3.connect(store) as db:
        (blob,) = db.execute("SELECT delta FROM steps WHERE idx = 3").fetchone()  # the insert's node
    db.close()
    node_id, fields = store_codec.decode(blob)[0]
    namespace, components = NodeRecord._fields.index("namespace"), NodeRecord._fields.index("components")
    for damaged in (fields[:components] + ((1, 2),) + fields[components + 1:],
                    fields[:namespace] + ((1, 2, 3),) + fields[namespace + 1:]):
        with sqlite3.connect(store) as db:
            db.execute("UPDATE steps SET delta = ? WHERE idx = 3", (store_codec.encode_plain([(node_id, damaged)]),))
        db.close()
        code, err = show(store, capsys, "--step", "3")
        assert code == 2 and f"damaged store: node {node_id}:" in err and len(err.strip().splitlines()) == 1, err


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


def test_many_small_objects_are_refused_before_they_are_built():
    """32 KB that would inflate to 32M ints (1.4 GB) is refused before one is made."""
    import tracemalloc

    count = store_codec.MAX_INFLATED - 5
    blob = b"z" + zlib.compress(b"\xdd" + count.to_bytes(4, "big") + b"\xe0" * count, 9)
    assert len(blob) < 64 << 10
    tracemalloc.start()
    try:
        with pytest.raises(store_codec.BlobError, match="objects could take over"):
            store_codec.decode(blob)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * store_codec.MAX_INFLATED  # the inflated bytes and their histogram, no objects


def test_a_type_mark_out_of_place_or_nested_too_deep_is_refused():
    import msgpack

    tuple_mark = msgpack.ExtType(1, b"")
    for misplaced in ([1, tuple_mark], {"key": tuple_mark}, tuple_mark, [[2, tuple_mark]]):
        with pytest.raises(store_codec.BlobError, match="malformed extension"):
            store_codec.decode(b"m" + msgpack.packb(misplaced))
    assert store_codec.decode(b"m" + msgpack.packb([tuple_mark, [tuple_mark, 1]])) == ((1,),)
    deep = msgpack.packb(1)
    for _ in range(5000):  # 800 bytes of nesting once crashed the reader (the C stack)
        deep = b"\x92" + msgpack.packb(tuple_mark) + deep  # a tuple holding the next
    with pytest.raises(store_codec.BlobError):
        store_codec.decode(b"m" + deep)


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
    page = int.from_bytes(data[16:18], "big")  # SQLite's header: the file's page size
    middle = len(data) // 2 // page * page
    data[middle:middle + page] = os.urandom(page)
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


def test_a_view_in_place_of_a_table_is_refused(store, capsys):
    with sqlite3.connect(store) as db:
        db.execute("ALTER TABLE steps RENAME TO old_steps")
        db.execute("CREATE VIEW steps AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
                   "SELECT i AS idx, 1 AS passed, x'' AS delta, x'' AS before, x'' AS globals, x'' AS record FROM n")
    db.close()
    code, err = show(store, capsys)  # the view never ends: reading it would hang
    assert code == 2 and "table steps is missing or not as written" in err


def test_a_run_left_unfinished_is_read_from_a_private_copy(tmp_path, capsys, monkeypatch):
    path = tmp_path / "run.urcdb"
    run_to_store(SMOKE, str(path)).close()
    with sqlite3.connect(path) as db:  # a later batch, left in the WAL as a killed run leaves it
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA wal_autocheckpoint = 0")
        db.execute("UPDATE meta SET value = ? WHERE name = 'notices'", (store_codec.encode(["from the WAL"]),))
        os.link(path.with_name("run.urcdb-wal"), tmp_path / "wal.keep")
    os.replace(tmp_path / "wal.keep", path.with_name("run.urcdb-wal"))  # (closing the writer merged it)
    (tmp_path / "run.urcdb-shm").unlink(missing_ok=True)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    before = snapshot_files(tmp_path)
    reopened = open_store(str(path))
    assert "from the WAL" in reopened.scenario.notices
    assert any("read from a private copy" in n for n in reopened.scenario.notices)
    reopened.close()
    assert snapshot_files(tmp_path) == before  # no -shm, no merge: nothing beside it written
    assert not list(scratch.iterdir())  # the copy is gone with the store


def test_steps_numbered_past_the_file_or_with_a_gap_are_refused(store, capsys):
    with sqlite3.connect(store) as db:
        db.execute("INSERT INTO steps SELECT 9223372036854775807, passed, delta, before, globals, record "
                   "FROM steps WHERE idx = 1")
    db.close()
    code, err = show(store, capsys)
    assert code == 2 and "steps are not numbered as written" in err
    with sqlite3.connect(store) as db:
        db.execute("DELETE FROM steps WHERE idx = 9223372036854775807")
        db.execute("DELETE FROM steps WHERE idx = 2")
    db.close()
    code = main(["show", str(store), "--walk"])
    err = capsys.readouterr().err
    assert code == 2 and "step 2 is missing" in err


def test_a_record_whose_items_are_not_as_declared_is_refused():
    import msgpack

    pool = store_codec.RECORDS.index(store_codec.GlobalRecord) + 16
    empty = [msgpack.ExtType(1, b"")]  # an empty tuple
    record = [msgpack.ExtType(pool, b""), 1, {"full": 3}, empty, empty, None, None, None, {}]
    with pytest.raises(store_codec.BlobError, match="GlobalRecord whose pools is not as declared"):
        store_codec.decode(b"m" + msgpack.packb(record))
    namespace = store_codec.RECORDS.index(store_codec.Namespace) + 16  # a named tuple's fields are checked too
    with pytest.raises(store_codec.BlobError, match="Namespace whose extra_key is not as declared"):
        store_codec.decode(b"m" + msgpack.packb([msgpack.ExtType(namespace, b""), 1, 2, 3]))


def test_the_charts_read_no_more_rows_than_the_steps(store, capsys):
    with sqlite3.connect(store) as db:
        width = store_codec.decode(db.execute("SELECT value FROM meta WHERE name = 'series_width'").fetchone()[0])
        bomb = zlib.compress(bytes(8 * width * 100_000), 9)  # 100,000 rows for a run of a few steps
        db.execute("UPDATE series SET rows = ? WHERE first = 0", (bomb,))
    db.close()
    code = main(["plot", str(store), "-o", "-"])
    err = capsys.readouterr().err
    assert code == 2 and "charts' rows" in err


def test_a_value_no_reader_expects_is_said_as_damage(store, capsys):
    """Right types, no sense (a shape naming an LRU list no component keeps): one line,
    exit 2, and the workbench says it and stays open."""
    import asyncio

    from workbench.tui.app import WorkbenchApp

    import dataclasses

    with sqlite3.connect(store) as db:
        shape = store_codec.decode(db.execute("SELECT value FROM meta WHERE name = 'shape'").fetchone()[0])
        shape = dataclasses.replace(shape, lru_components=("zzz",))  # a list no component keeps
        db.execute("UPDATE meta SET value = ? WHERE name = 'shape'", (store_codec.encode(shape),))
    db.close()
    code, err = show(store, capsys, "--step", "1")
    assert code == 2 and "damaged store: a value is not as urc writes it" in err
    assert "internal error" not in err and len(err.strip().splitlines()) == 1

    async def drive():
        app = WorkbenchApp([open_store(str(store))])
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("n")
            await pilot.pause()
            assert app.is_running
            assert any("damaged store" in n.message for n in app._notifications)

    asyncio.run(drive())


def test_a_stored_op_and_field_name_never_reach_the_screen_raw(store, capsys):
    """Ops and field names are checked in a scenario, not in a store: a crafted step's
    op and field key carry ESC, and the CLI and the TUI show them escaped."""
    import asyncio

    from workbench.tui.app import WorkbenchApp
    from workbench.tui.widgets.step_list import step_line

    with sqlite3.connect(store) as db:
        row = store_codec.decode(db.execute("SELECT record FROM steps WHERE idx = 1").fetchone()[0])
        step = list(row[0])
        step[2] = "\x1b[31mevil\x1b]0;title\x07"  # op
        step[3] = {"\x1b[32mkey": 1}  # fields
        step[7] = {}  # raw
        step[8] = []  # the names raw shares with fields
        step[9] = {}  # the token fields written apart
        db.execute("UPDATE steps SET record = ? WHERE idx = 1",
                   (store_codec.encode((tuple(step), *row[1:]), compress=False),))
    db.close()
    assert main(["show", str(store), "--walk"]) in (0, 1)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b[31mevil" in out

    async def drive():
        app = WorkbenchApp([open_store(str(store))])
        async with app.run_test(size=(120, 40)) as pilot:
            app.cursor.go(1)
            app.refresh_view()
            await pilot.pause()
            line = step_line(app.cursor.timeline.records[0])
            assert "\x1b" not in line.plain and "\\x1b[31mevil" in line.plain

    asyncio.run(drive())
