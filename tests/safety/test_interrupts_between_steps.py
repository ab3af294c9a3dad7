"""Ctrl-C and SIGTERM stop a run between steps: one that arrives while a step runs
waits for the step to be checked and stored, a second one stops it at once (and the
step cut short is undone). Each signal is raised in this process, inside a chosen
cache call (``signal_util``)."""

from __future__ import annotations

import itertools
import os
import signal

import pytest

from signal_util import ctrl_c_raising, inside_an_insert_that_shared_a_prefix, signal_inside
from workbench.cli import main
from workbench.model.scenarios.workload import write_trace
from workbench.model.timeline.series import RowMaker
from workbench.model.timeline.stored import open_store


@pytest.fixture(autouse=True)
def ctrl_c_raises():
    with ctrl_c_raising():
        yield


@pytest.fixture
def trace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open("t.jsonl", "w") as stream:
        write_trace(stream, 60, seed=3)
    return tmp_path


def stored_ops(path: str) -> list[tuple[str, bool]]:
    timeline = open_store(path)
    try:
        assert not timeline.complete
        return [(record.step.op, record.passed) for record in timeline.records]
    finally:
        timeline.close()


@pytest.mark.parametrize("number, code, word", [(signal.SIGTERM, 143, "terminated"),
                                                (signal.SIGINT, 130, "interrupted")])
def test_a_signal_mid_insert_stops_the_run_once_the_step_is_stored(trace, monkeypatch, capsys, number, code, word):
    seen = inside_an_insert_that_shared_a_prefix(monkeypatch, (number,))
    assert main(["run", "t.jsonl", "--store", "x.urcdb"]) == code
    assert seen, "no insert shared a prefix: the trace changed"
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"urc run: {word}"
    ops = stored_ops("x.urcdb")
    assert ops[-1] == ("insert", True)  # the step the signal landed in, whole and checked
    assert all(passed for _, passed in ops)


def test_a_second_signal_in_the_same_step_stops_at_once_and_the_step_is_undone(trace, monkeypatch, capsys):
    inside_an_insert_that_shared_a_prefix(monkeypatch, (signal.SIGTERM,))
    assert main(["run", "t.jsonl", "--store", "once.urcdb"]) == 143
    monkeypatch.undo()
    monkeypatch.chdir(trace)
    inside_an_insert_that_shared_a_prefix(monkeypatch, (signal.SIGTERM, signal.SIGTERM))
    assert main(["run", "t.jsonl", "--store", "twice.urcdb"]) == 143
    once, twice = stored_ops("once.urcdb"), stored_ops("twice.urcdb")
    assert twice == once[:-1]  # the same insert, cut short this time: not stored, the steps before it are


def nth_call(n: int):
    calls = itertools.count(1)
    return lambda result: next(calls) == n


def test_a_row_half_added_when_the_run_stops_is_undone(trace, monkeypatch, capsys):
    """Two signals inside step 5's row of the charts' numbers (the first row is the
    start's): its record is not in yet, so the store drops the step instead of failing
    to write it."""
    calls = signal_inside(monkeypatch, RowMaker, "row", (signal.SIGTERM, signal.SIGTERM), nth_call(6))
    assert main(["run", "t.jsonl", "--store", "x.urcdb"]) == 143
    assert calls and capsys.readouterr().err.strip().splitlines()[-1] == "urc run: terminated"
    assert len(stored_ops("x.urcdb")) == 4


def test_a_signal_while_the_store_is_made_leaves_no_file(trace, monkeypatch, capsys):
    calls = signal_inside(monkeypatch, RowMaker, "row", (signal.SIGTERM,), nth_call(1))
    assert main(["run", "t.jsonl", "--store", "x.urcdb"]) == 143
    assert calls and sorted(os.listdir(trace)) == ["t.jsonl"]


def test_a_run_in_memory_reports_the_step_the_signal_landed_in(trace, monkeypatch, capsys):
    inside_an_insert_that_shared_a_prefix(monkeypatch, (signal.SIGINT,))
    assert main(["run", "t.jsonl", "--store", "x.urcdb"]) == 130
    monkeypatch.undo()
    monkeypatch.chdir(trace)
    inside_an_insert_that_shared_a_prefix(monkeypatch, (signal.SIGINT,))
    capsys.readouterr()
    assert main(["run", "t.jsonl"]) == 130
    checked = len(stored_ops("x.urcdb"))
    assert f"(interrupted: {checked} steps of 240 checked, 0 failed)" in capsys.readouterr().out


def test_an_ignored_ctrl_c_stays_ignored(trace, monkeypatch):
    seen = inside_an_insert_that_shared_a_prefix(monkeypatch, (signal.SIGINT,))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert main(["run", "t.jsonl"]) == 0
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen


def test_the_handlers_last_only_as_long_as_the_command():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    assert main(["fuzz", "--list-faults"]) == 0
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_ctrl_c_mid_insert_in_a_fuzz_campaign_is_no_finding(trace, monkeypatch, capsys):
    seen = inside_an_insert_that_shared_a_prefix(monkeypatch, (signal.SIGINT,))
    assert main(["fuzz", "--seeds", "1", "--steps", "200", "--jobs", "1"]) == 130
    assert seen and capsys.readouterr().out.startswith("STOPPED (interrupted): no failure in ")


def test_a_file_that_appears_at_the_path_before_the_store_is_made_stays(trace, monkeypatch):
    """The path was free when checked, and someone's file is there when the store is
    made: the store cannot be made, and that file keeps its bytes."""
    from workbench.model.timeline import store_run

    (trace / "x.urcdb").write_bytes(b"someone's notes, not a database " * 64)
    monkeypatch.setattr(store_run.os.path, "lexists", lambda path: False)  # as it was when checked
    with pytest.raises(store_run.StoreError, match="cannot write"):
        store_run.run_to_store("t.jsonl", "x.urcdb")
    assert (trace / "x.urcdb").read_bytes() == b"someone's notes, not a database " * 64
