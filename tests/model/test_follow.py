"""Following a growing JSONL trace: only complete lines, read incrementally, and a
stop with a one-line FollowError when the file can no longer be trusted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from workbench.model.debugging.cursor import TimelineCursor
from workbench.model.timeline.follow import FINGERPRINT_BYTES, FollowError, TraceFollower
from workbench.model.timeline.runner import run_scenario, same_state
from workbench.model.scenarios.scenario import ScenarioError, load_scenario
from workbench.model.scenarios.writer import scenario_jsonl

ROOT = Path(__file__).resolve().parents[2]
HEADER = {"schema": 1, "scenario": {"name": "followed"}, "config": {"components": ["full"], "kv_size": 64}}


def step(n: int) -> dict:
    return {"op": "insert", "key": [n, n + 1, n + 2]}


def line(obj) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as stream:
        stream.write(data)


@pytest.fixture
def trace(tmp_path) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(line(HEADER) + line(step(1)))
    return path


def started(path: Path) -> TraceFollower:
    follower = TraceFollower(path)
    scenario = follower.start()
    assert scenario is not None, follower.waiting
    return follower


def test_start_reads_the_header_and_the_steps_already_there(trace):
    follower = started(trace)
    assert follower.scenario.name == "followed"
    assert [(s.op, s.line) for s in follower.scenario.steps] == [("insert", 2)]
    assert follower.poll() == []


def test_lines_appended_in_chunks_come_back_once_with_their_line_numbers(trace):
    follower = started(trace)
    append(trace, line(step(10)) + line(step(20)))
    assert follower.poll() == [(step(10), 3), (step(20), 4)]
    assert follower.poll() == []
    append(trace, b"\n" + line(step(30)))  # a blank line counts but is skipped, like the loader
    assert follower.poll() == [(step(30), 6)]
    append(trace, b"# a recorder's comment\n" + line(step(40)))  # so is a comment
    assert follower.poll() == [(step(40), 8)]


def test_a_line_split_across_two_writes_waits_for_its_newline(trace):
    follower = started(trace)
    whole = line(step(40))
    append(trace, whole[:7])
    assert follower.poll() == []
    assert follower.pending_bytes == 7
    append(trace, whole[7:-1])  # still no newline
    assert follower.poll() == []
    append(trace, b"\n" + line(step(50))[:3])
    assert follower.poll() == [(step(40), 3)]
    append(trace, line(step(50))[3:])
    assert follower.poll() == [(step(50), 4)]
    assert follower.poll() == []
    assert follower.pending_bytes == 0


def test_start_waits_for_the_file_and_a_complete_header(tmp_path):
    path = tmp_path / "trace.jsonl"
    follower = TraceFollower(path)
    assert follower.start() is None
    assert "to appear" in follower.waiting
    header = line(HEADER)
    path.write_bytes(header[:10])
    assert follower.start() is None
    assert "waiting for the header line" in follower.waiting
    append(path, header[10:] + line(step(1))[:5])  # header complete, the first step not yet
    scenario = follower.start()
    assert scenario is not None and scenario.steps == () and follower.waiting is None
    append(path, line(step(1))[5:])
    assert follower.poll() == [(step(1), 2)]


def test_poll_before_the_header_is_a_usage_error(tmp_path):
    with pytest.raises(RuntimeError, match="start"):
        TraceFollower(tmp_path / "trace.jsonl").poll()


def test_a_bad_header_is_the_loaders_error(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_bytes(line({"schema": 2, "scenario": {"name": "x"}, "config": {"components": ["full"], "kv_size": 8}}))
    with pytest.raises(ScenarioError, match=r"trace.jsonl:1: schema must be 1"):
        TraceFollower(path).start()


def stopped_with(follower: TraceFollower, pattern: str) -> FollowError:
    """The follower raises ``pattern`` now and the same error on every later poll."""
    with pytest.raises(FollowError, match=pattern) as first:
        follower.poll()
    with pytest.raises(FollowError) as again:
        follower.poll()
    assert again.value is first.value and follower.stopped is first.value
    assert "\n" not in str(first.value) and "read so far are kept" in str(first.value)
    return first.value


def test_a_deleted_trace_stops_the_follower(trace):
    follower = started(trace)
    trace.unlink()
    error = stopped_with(follower, "deleted")
    assert isinstance(error, ScenarioError)
    trace.write_bytes(line(HEADER))  # coming back does not restart it
    stopped_with(follower, "deleted")


def test_a_truncated_and_rewritten_shorter_trace_stops_the_follower(trace):
    follower = started(trace)
    append(trace, line(step(10)))
    assert len(follower.poll()) == 1
    with open(trace, "r+b") as stream:  # the same file (inode), shorter content
        stream.truncate(0)
        stream.write(line(HEADER))
    stopped_with(follower, r"shrank to [\d,]+ bytes, below the [\d,]+ already read")


def test_a_trace_rewritten_in_place_stops_the_follower(trace):
    follower = started(trace)
    size = trace.stat().st_size
    other = line(HEADER) + line(step(7))  # the same length, other bytes, then more
    assert len(other) == size
    with open(trace, "r+b") as stream:
        stream.write(other + line(step(8)))
    stopped_with(follower, "bytes already read have changed")


def test_a_trace_replaced_by_rename_stops_the_follower(trace, tmp_path):
    follower = started(trace)
    fresh = tmp_path / "fresh.jsonl"
    fresh.write_bytes(trace.read_bytes() + line(step(10)))  # even a longer copy is another file
    os.replace(fresh, trace)
    stopped_with(follower, "replaced by another file")


def test_a_malformed_line_stops_the_follower_at_its_line(trace):
    follower = started(trace)
    append(trace, b'{"op": "insert", "key": [1,\n')
    error = stopped_with(follower, r"trace.jsonl:3: malformed JSON")
    assert error.line == 3 and "the 1 step read so far are kept" in str(error)


def test_good_lines_before_a_bad_one_are_returned_and_the_next_poll_stops(trace):
    follower = started(trace)
    append(trace, line(step(10)) + b"[1, 2]\n" + line(step(20)))
    assert follower.poll() == [(step(10), 3)]
    assert follower.stopped is not None
    error = stopped_with(follower, r"trace.jsonl:4: each step line must be a JSON object")
    assert "the 2 steps read so far are kept" in str(error)


def test_polling_reads_only_the_new_bytes(trace, monkeypatch):
    follower = started(trace)
    append(trace, line(step(10)))
    reads: list[int] = []
    real_read = follower._file.read
    monkeypatch.setattr(follower._file, "read", lambda n=-1: reads.append(n) or real_read(n))
    assert follower.poll() == [(step(10), 3)]
    assert reads == [FINGERPRINT_BYTES, len(line(step(10)))]  # the fingerprint, then the new line; never the file
    reads.clear()
    assert follower.poll() == []
    assert reads == []  # unchanged: a stat, no read


def test_a_followed_trace_ends_in_the_state_of_the_whole_run(tmp_path):
    scenario = load_scenario(ROOT / "scenarios/tour.toml")
    lines = scenario_jsonl(scenario).encode().splitlines(keepends=True)
    path = tmp_path / "tour.jsonl"
    path.write_bytes(b"".join(lines[:4]))  # the header and 3 steps
    follower = started(path)
    cursor = TimelineCursor([follower.scenario])
    cursor.load(0)
    assert len(cursor.timeline) == 3
    rest = lines[4:]
    for batch in (rest[: len(rest) // 2], rest[len(rest) // 2:]):
        append(path, b"".join(batch))
        added = cursor.extend(follower.poll())
        assert len(added) == len(batch)
    whole = run_scenario(ROOT / "scenarios/tour.toml")
    followed = cursor.timeline
    assert len(followed) == len(whole) == len(scenario.steps)
    assert followed.passed and whole.passed
    assert [r.step.line for r in followed.records] == list(range(2, len(lines) + 1))
    assert [r.result for r in followed.records] == [r.result for r in whole.records]
    assert same_state(followed.final.to_snapshot(), whole.final.to_snapshot())
