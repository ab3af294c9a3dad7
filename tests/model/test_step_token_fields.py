"""A step's token fields are packed once, by the check that loads it: the op hands the
packed ids to the cache, and a store writes them as bytes, never the list again."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from array import array
from pathlib import Path

import pytest

import cache.basics.keys as keys_module
from workbench.cli import main
from workbench.model.scenarios.scenario import load_scenario
from workbench.model.timeline import store_codec, store_rows, stored
from workbench.model.timeline.runner import Runner, run_scenario
from workbench.model.timeline.store_run import run_to_store
from workbench.model.timeline.stored import open_store


def write_trace(tmp_path: Path, steps: list[dict], name: str = "t.jsonl") -> Path:
    header = {"schema": 1, "scenario": {"name": "tokens"}, "config": {"components": ["full"], "kv_size": 256}}
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(x) for x in [header, *steps]) + "\n")
    return path


WIDE = [70_000, 1, 2, 2**31 - 1]  # past 2**16: written 4 bytes an id
STEPS = [{"op": "insert", "key": [5, 6, 7, 8]}, {"op": "insert", "key": WIDE},
         {"op": "match", "key": [5, 6, 7, 9], "as": "m"}, {"op": "lock", "match": "m", "as": "l"}]


def test_a_checked_steps_key_is_packed_once(tmp_path, monkeypatch):
    """The check packs it; the op's cache calls take those bytes (``array('I')``, one C
    pass) rather than packing the list again."""
    scenario = load_scenario(write_trace(tmp_path, STEPS))
    step = scenario.steps[0]
    assert step.packed_tokens("key") == array("I", [5, 6, 7, 8]).tobytes()
    assert step.packed_tokens("op") is None
    lists = []
    real = keys_module.pack_token_list
    monkeypatch.setattr(keys_module, "pack_token_list", lambda ids: lists.append(ids) or real(ids))
    timeline = Runner(scenario).run()
    assert timeline.passed and lists == []
    assert timeline.records[2].result["prefix_len"] == 3


def test_a_step_whose_key_was_replaced_runs_the_new_key(tmp_path):
    """Packed bytes are trusted only while the field is the list they were packed from:
    a step copied with another key runs that key."""
    scenario = load_scenario(write_trace(tmp_path, STEPS[:1]))
    step = scenario.steps[0]
    moved = dataclasses.replace(step, fields={**step.fields, "key": [9, 9, 9]})
    assert moved.packed_tokens("key") is None
    timeline = Runner(dataclasses.replace(scenario, steps=(moved,))).run()
    assert [r.key for r in timeline.state_after(1).records.values() if r.parent is not None] == [
        array("I", [9, 9, 9]).tobytes()]


def test_token_fields_are_stored_as_bytes_and_read_back_as_lists(tmp_path):
    path = write_trace(tmp_path, STEPS)
    run_to_store(str(path), str(tmp_path / "run.urcdb")).close()
    with sqlite3.connect(tmp_path / "run.urcdb") as db:
        rows = [store_codec.decode(blob)[0] for (blob,) in db.execute("SELECT record FROM steps ORDER BY idx")]
    db.close()
    assert [sorted(row[-1]) for row in rows] == [["key"], ["key"], ["key"], []]
    assert rows[0][-1]["key"][:1] == b"\x02" and rows[1][-1]["key"][:1] == b"\x04"  # 2 bytes an id, then 4
    assert rows[1][3]["key"] is None  # not written twice
    memory, disk = run_scenario(path), open_store(str(tmp_path / "run.urcdb"))
    assert [r.step for r in disk.records] == [r.step for r in memory.records]
    assert disk.records[1].step.fields["key"] == WIDE and disk.records[1].step.raw["key"] == WIDE


def test_a_store_whose_steps_hold_their_token_lists_still_reads(tmp_path, monkeypatch):
    """Format 4 wrote a step's token lists inside its fields, with no bytes beside them."""
    new_row = store_rows.step_row

    def old_row(step):
        return new_row(dataclasses.replace(step, packed={}))[:-1]

    monkeypatch.setattr(store_rows, "step_row", old_row)
    monkeypatch.setattr(stored, "FORMAT", 4)
    path = write_trace(tmp_path, STEPS)
    run_to_store(str(path), str(tmp_path / "run.urcdb")).close()
    monkeypatch.undo()
    memory, disk = run_scenario(path), open_store(str(tmp_path / "run.urcdb"))
    assert [r.step for r in disk.records] == [r.step for r in memory.records]


@pytest.mark.parametrize("blob", [b"\x03" + bytes(6), b"\x02" + bytes(3), b"\x04" + (2**31).to_bytes(4, "little"),
                                  b"", "text"])
def test_damaged_token_bytes_are_one_line(tmp_path, capsys, blob):
    path = write_trace(tmp_path, STEPS)
    store = tmp_path / "run.urcdb"
    run_to_store(str(path), str(store)).close()
    with sqlite3.connect(store) as db:
        record = list(store_codec.decode(db.execute("SELECT record FROM steps WHERE idx = 1").fetchone()[0]))
        record[0] = (*record[0][:-1], {"key": blob})
        db.execute("UPDATE steps SET record = ? WHERE idx = 1", (store_codec.encode(tuple(record), compress=False),))
    db.close()
    code = main(["show", str(store), "--walk"])
    err = capsys.readouterr().err
    assert code == 2 and "damaged store: a step's token ids are not as written" in err
    assert len(err.strip().splitlines()) == 1


def test_a_row_cannot_build_more_ids_than_a_value_may(monkeypatch):
    """Each token field's bytes are bounded like any value's objects: a row whose fields
    together would build past the limit is refused before the lists are made."""
    monkeypatch.setattr(store_rows, "MAX_DECODED", 6 * store_rows._ID_COST)
    with pytest.raises(stored.StoreError, match="token ids are not as written"):
        store_rows.step_of((1, 1, "insert", {"key": None, "other": None}, {}, None, "", {}, [],
                            {"key": b"\x02" + bytes(8), "other": b"\x02" + bytes(8)}), "run.urcdb")
