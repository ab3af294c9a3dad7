"""``why`` about a session (``why_session``, ``urc why --session``): which eviction took
its tagged data and why the tag did not save it (closed first, or still tagged with no
untagged data left), why its data is still there (tagged, locked by its slot, untagged
data taken instead), on small scenarios run live at page 1."""

from __future__ import annotations

import re

import pytest

from urc_util import urc
from workbench.model.debugging.why_session import why_session
from workbench.model.scenarios.scenario import scenario_from_records
from workbench.model.timeline.runner import Runner

HYBRID = {"components": ["full", "swa", "mamba"], "page_size": 1, "kv_size": 24, "sliding_window": 2,
          "swa_kv_size": 24, "mamba_size": 4, "session_radix_cache": True}
TAGGED = [{"op": "session_open", "session": "s1"},
          {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4, 5, 6], "session": "s1"},
          {"op": "release", "req": "r1"}]  # s1 tags #2 [1..4] and #1 [5, 6] (Full, SWA), #1 (Mamba)


def run(config: dict, *steps: dict):
    timeline = Runner(scenario_from_records({"schema": 1, "scenario": {"name": "t"}, "config": config},
                                            list(steps))).run()
    assert timeline.passed and not any(r.error for r in timeline.records)
    return timeline


def told(timeline, step: int, sid: str):
    """The answer's lines without the JSONL line numbers (``, line N``) of the steps."""
    answer = why_session(timeline, step, sid)
    return answer, tuple(re.sub(r", line \d+", "", line) for line in answer.lines)


@pytest.fixture(scope="module")
def closed_then_evicted():
    return run(HYBRID, *TAGGED, {"op": "insert", "key": [9, 9, 9, 9]}, {"op": "evict", "full": 3},
               {"op": "session_release", "session": "s1"}, {"op": "evict", "full": 4})


def test_kept_while_tagged_and_untagged_data_went_first(closed_then_evicted):
    answer, lines = told(closed_then_evicted, 5, "s1")
    assert lines[:3] == (
        "open since step 1 (session_open s1) (generation 1)",
        "tags now, through its frontier Full #1, SWA #1, Mamba #1",
        "Full KV of #1 is still there: tagged by the session since step 3 (release r1) (session_ref 1): eviction "
        "takes untagged data first")
    assert lines[-1] == ("step 5 (evict full=3) took untagged data (Full #3, #4) while the session's tagged "
                                "data stayed: eviction prefers untagged data")
    assert answer.steps == (1, 3, 5) and len(answer.lines) == 8  # 5 kept node-components


def test_evicted_after_the_close_took_its_tags(closed_then_evicted):
    lines = told(closed_then_evicted, 7, "s1")[1]
    assert lines[:2] == ("closed at step 6 (session_release s1): its tags went with the close, so its data became "
                         "evictable like any other (untagged data goes first)", "tags nothing now")
    assert lines[2] == (
        "Full KV of #1 evicted at step 7 (evict full=4): Full capacity eviction needed 4 tokens (asked by the evict "
        "op); node #1 was the least recently used evictable leaf, so it was deleted whole; the cascade took its SWA KV "
        "(2 tokens) and Mamba state; it was no longer tagged: the session closed at step 6 (session_release s1), so "
        "it was evictable first")
    assert [line.split(" at ")[0] for line in lines[2:4]] == ["Full KV of #1 evicted", "Full KV of #2 evicted"]
    assert len(lines) == 5  # the cascades are told on their trigger's line; step 5's spared line stays


def test_evicted_while_tagged_names_the_untagged_victim_taken_first():
    timeline = run({"components": ["full"], "page_size": 1, "kv_size": 10, "session_radix_cache": True}, *TAGGED,
                   {"op": "insert", "key": [9, 9]}, {"op": "req_prefill", "req": "r2", "tokens": [7] * 7})
    lines = told(timeline, 5, "s1")[1]
    assert lines[1:] == (
        "tags nothing now",
        "Full KV of #1 evicted at step 5 (req_prefill r2): Full capacity eviction needed 5 tokens (an allocation in "
        "new_request fell short); node #1 was the least recently used evictable leaf, so it was deleted whole; it was "
        "still tagged, but no untagged Full KV was left to take after the untagged #2")


def test_a_streaming_session_is_kept_by_its_slot_lock():
    timeline = run({"components": ["full", "swa"], "page_size": 1, "kv_size": 16, "sliding_window": 2,
                    "swa_kv_size": 16, "session_radix_cache": True},
                   {"op": "session_open", "session": "s2", "streaming": True},
                   {"op": "stream_turn", "req": "t1", "tokens": [1, 2, 3], "session": "s2"},
                   {"op": "release", "req": "t1"}, {"op": "evict", "full": 16},
                   {"op": "session_release", "session": "s2"})
    kept = told(timeline, 4, "s2")[1]
    assert kept[1:4] == ("tags nothing (a streaming session: its slot's lock keeps its KV)",
                         "its slot at step 2 (stream_turn t1): taken from t1",
                         "its slot at step 3 (release t1): kept from t1")
    assert "its slot has locked #1 (Full, lock_ref 1) since step 2 (stream_turn t1): no eviction may take it or " \
           "its ancestors" in kept
    closed = told(timeline, 5, "s2")[1]
    assert closed[0] == "closed at step 5 (session_release s2): its slot let go of what it kept"
    assert closed[-1] == "its slot at step 5 (session_release s2): released" and not any("locked" in x for x in closed)


def test_an_unknown_session_or_step_is_refused(closed_then_evicted):
    with pytest.raises(ValueError, match="no session 's9' up to step 7"):
        why_session(closed_then_evicted, 7, "s9")
    with pytest.raises(ValueError, match="out of range"):
        why_session(closed_then_evicted, 99, "s1")


def test_urc_why_asks_about_a_session(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text('schema = 1\n[scenario]\nname = "s"\n[config]\ncomponents = ["full"]\npage_size = 1\n'
                    'kv_size = 8\nsession_radix_cache = true\n[[step]]\nop = "session_open"\nsession = "s1"\n'
                    '[[step]]\nop = "req_prefill"\nreq = "r1"\ntokens = [1, 2, 3]\nsession = "s1"\n'
                    '[[step]]\nop = "release"\nreq = "r1"\n[[step]]\nop = "session_release"\nsession = "s1"\n')
    code, out, _ = urc(capsys, "why", str(path), "--step", "3", "--session", "s1")
    assert code == 0 and "Full KV of #1 is still there: tagged by the session since step 3" in out
    code, _, err = urc(capsys, "why", str(path), "--session", "s1", "--node", "1")
    assert code == 2 and "one of a node, a request, a session or a prefetch" in err


def test_coverage_that_moved_on_and_a_tagged_victim_after_untagged_ones():
    """SWA covers the last window plus a page: r2's longer finish moves s1's SWA tag off
    #1 and #2, so an SWA eviction takes them first, then the still-tagged #3."""
    timeline = run({"components": ["full", "swa"], "page_size": 1, "kv_size": 24, "sliding_window": 2,
                    "swa_kv_size": 12, "session_radix_cache": True}, *TAGGED[:1],
                   {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4], "session": "s1"},
                   {"op": "release", "req": "r1"},
                   {"op": "req_prefill", "req": "r2", "tokens": [1, 2, 3, 4, 5, 6, 7, 8], "session": "s1"},
                   {"op": "release", "req": "r2"}, {"op": "evict", "swa": 6})
    answer, lines = told(timeline, 6, "s1")
    moved = [x for x in lines if x.startswith("SWA KV of #1 tombstoned")]
    assert moved and moved[0].endswith("it was no longer tagged: its coverage had moved off it (a newer frontier, "
                                       "or a deleted one receding) at step 5 (release r2), so it was evictable first")
    assert lines[-1].startswith("SWA KV of #3 evicted at step 6 (evict swa=6)") and lines[-1].endswith(
        "it was still tagged, but no untagged SWA KV was left to take after the untagged #1, #2")
    assert not any("took untagged data" in x for x in lines)  # the loss line already names the victims
