"""A long input's first cut: read once, keeping only the tail and each step's definers,
so a stored run of any length shrinks without its steps being held whole."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from test_shrink_cli import padded_trace
from urc_util import urc
from workbench.model.fuzzing import shrink_file, shrink_tail
from workbench.model.fuzzing.config import FuzzConfig
from workbench.model.fuzzing.fuzz import OpGenerator, first_finding
from workbench.model.fuzzing.shrink import with_definers
from workbench.model.scenarios.scenario import load_scenario


def test_the_packed_name_index_keeps_the_definers_with_definers_keeps():
    steps = list(itertools.islice(OpGenerator(FuzzConfig(("full", "swa"), 1), 3), 600))
    names = shrink_tail.NameIndex()
    for step in steps:
        names.add(step)
    for size in (1, 7, 50, 300):
        keep = range(len(steps) - size, len(steps))
        assert names.closure(keep, 10_000) == with_definers(steps, keep)
    assert any(len(with_definers(steps, range(j, j + 1))) > 1 for j in range(len(steps)))  # names are used
    assert names.closure(range(len(steps) - 300, len(steps)), 10) is None  # past the cap: not tried


def test_a_long_stored_run_is_cut_from_its_tail_without_reading_its_steps_whole(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    padded_trace(tmp_path / "trace.jsonl", noise=200)
    rc, out, err = urc(capsys, "run", "trace.jsonl", "--store", "run.urcdb")
    assert rc == 1, err
    monkeypatch.setattr(shrink_tail, "LONG", 50)
    monkeypatch.setattr(shrink_file, "LONG", 50)
    monkeypatch.setattr(shrink_tail, "TAIL", 64)

    def whole(*_):
        raise AssertionError("the steps were read whole")

    monkeypatch.setattr(shrink_file, "steps_upto", whole)
    rc, out, err = urc(capsys, "shrink", "run.urcdb", "-o", "small.toml", "--json")
    assert rc == 0, err
    summary = json.loads(out)
    assert summary["input_steps"] > 250 and summary["steps"] <= 5 and summary["fails_the_same_way"]
    assert first_finding(load_scenario("small.toml")).check == "invariant session.ref_balance"
    lines = [int(line.rsplit(":", 1)[1]) for line in Path("small.toml").read_text().splitlines()
             if line.startswith("# from run.urcdb:")]
    assert lines and min(lines) > 200  # each step still says where it came from: the repro's lines


def test_a_tail_that_never_reproduces_falls_back_to_the_whole_input(monkeypatch):
    steps = [type("S", (), {"raw": {"op": "insert", "key": [i + 1]}, "line": i + 1})() for i in range(100)]
    tried = []

    def attempt(candidate):
        tried.append(len(candidate))
        return False

    monkeypatch.setattr(shrink_tail, "TAIL", 40)
    assert shrink_tail.tail_cut(steps, 90, attempt, lambda: False) is None
    assert tried == [1, 4, 16]  # the last 1, 4, 16 steps (64 > the 40 held): then the caller reads them all


def test_bench_shrink_store_shrinks_the_stored_run_in_a_process_of_its_own(capsys):
    rc, out, err = urc(capsys, "bench", "--shrink", "--store", "--steps", "300", "--json")
    report = json.loads(out)
    assert rc == 0, err
    assert report["target_step"] == report["store_steps"] == 305 and report["shrunk_steps"] <= 10
    assert report["check"] == "invariant session.ref_balance" and report["peak_rss_mb"] > 0
