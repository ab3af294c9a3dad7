"""Hostile inputs that do not fit test_bad_inputs.py's table: a SIGTERM in the middle
of a store being written, a stored key far larger than what a view shows, a followed
trace with a number Python will not read."""

from __future__ import annotations

import io
import json
import os
import pickle
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from workbench.model.scenarios.workload import write_trace
from workbench.model.timeline.fmt import counted_key_text, tokens_text
from workbench.model.timeline.packed import PackedTokens

ROOT = Path(__file__).resolve().parents[2]
HUGE_KEY = bytes(30_000_000)  # 7.5M tokens of 0: the probe's store named one such key from 40 nodes


def test_sigterm_mid_store_cleans_up_as_ctrl_c_does(tmp_path):
    """SIGTERM ended urc at once and left the store's ``.part``, ``-wal`` and ``-shm``
    beside it and the storage directory in TMPDIR; now it unwinds like Ctrl-C (each
    cleanup runs) and exits 143, the old store untouched."""
    with open(tmp_path / "t.jsonl", "w") as stream:
        write_trace(stream, 3000, seed=3)
    (tmp_path / "x.urcdb").write_bytes(b"old")
    private = tmp_path / "tmp"
    private.mkdir()
    child = subprocess.Popen([sys.executable, "-m", "workbench", "run", "t.jsonl", "--store", "x.urcdb", "--force"],
                             cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(private)})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:  # until SQLite's side files exist
            if any(name.endswith(".part-wal") for name in os.listdir(tmp_path)):
                break
            time.sleep(0.05)
        assert child.poll() is None, "the run finished before it could be stopped: make the trace longer"
        assert os.listdir(private), "the run's storage directory is not there yet"
        time.sleep(0.5)  # a few batches in
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 143, err.decode()
    assert err.decode().strip().splitlines()[-1] == "urc run: terminated"
    assert sorted(os.listdir(tmp_path)) == ["t.jsonl", "tmp", "x.urcdb"]
    assert (tmp_path / "x.urcdb").read_bytes() == b"old" and os.listdir(private) == []


def test_a_huge_key_is_shown_without_unpacking_it():
    tracemalloc.start()
    try:
        text = tokens_text(PackedTokens(HUGE_KEY))
        counted = counted_key_text(PackedTokens(HUGE_KEY))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert text == "[0 0 0 … 0 0] (7,500,000 tokens)" and counted == "[0 0 0 … 0 0]  (7,500,000 tokens)"
    assert peak < 100_000, peak  # a list of the key was 60 MB


def test_a_stored_state_whose_nodes_share_a_huge_key_renders_small():
    """``urc show`` on such a store peaked at 4.9 GB: every node's view held its key
    and its path as tuples. Now the tree is drawn unpacking five tokens a node."""
    from rich.console import Console

    from workbench.model.timeline.runner import run_scenario
    from workbench.model.timeline.states import TimelineState
    from workbench.render.tree_view import render_state

    timeline = run_scenario(ROOT / "scenarios" / "tour.toml")
    state = max((timeline.state_after(i) for i in range(len(timeline) + 1)), key=lambda s: len(s.records))
    records = {i: r if r.parent is None else r._replace(key=HUGE_KEY) for i, r in state.records.items()}
    assert len(records) > 3
    hostile = TimelineState(state.shape, records, state.globals)
    out = io.StringIO()
    tracemalloc.start()
    try:
        Console(file=out, width=200, color_system=None).print(render_state(hostile))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.getvalue().count("[0 0 0 … 0 0] 7500000t") == len(records) - 1
    assert peak < 20_000_000, peak  # one node's key as a tuple was 60 MB, its path as much again


def test_packed_tokens_read_as_the_tuple_they_stand_for():
    key = (5, 0, 2**31 - 1, 7)
    packed = PackedTokens(b"".join(t.to_bytes(4, sys.byteorder) for t in key))
    assert len(packed) == 4 and packed[2] == 2**31 - 1 and packed[-1] == 7 and packed[1:3] == (0, 2**31 - 1)
    assert packed[::-2] == key[::-2] and list(packed) == list(key) and (9,) + packed == (9, *key)
    assert packed == key and key == packed and packed != key[:3] and {key: 1}[packed] == 1 and packed in {key}
    assert sorted([PackedTokens(b"\x09\0\0\0"), packed]) == [key, (9,)]
    assert pickle.loads(pickle.dumps(PackedTokens(lambda: bytes(8)))) == (0, 0)
    with pytest.raises(IndexError):
        packed[4]


def test_a_followed_trace_with_a_number_past_the_digit_limit_stops_at_its_line(tmp_path):
    from workbench.model.timeline.follow import FollowError, TraceFollower

    path = tmp_path / "trace.jsonl"
    header = {"schema": 1, "scenario": {"name": "t"}, "config": {"components": ["full"], "kv_size": 64}}
    path.write_text(json.dumps(header) + "\n")
    follower = TraceFollower(path)
    assert follower.start() is not None
    with open(path, "a") as stream:
        stream.write('{"op": "insert", "key": [' + "9" * 5000 + "]}\n")
    with pytest.raises(FollowError, match=r"trace\.jsonl:2: a number has more than 4,300 digits; stopped following"):
        follower.poll()
