"""The ``session=ID`` breakpoint term: steps whose op names the session, that run one of
its requests, or whose events are about its tag or its streaming slot — checked against
every step of scenarios run live, and through ``urc run --until``."""

from __future__ import annotations

import pytest

from urc_util import urc
from workbench.model.debugging.breakpoints import ConditionError, holds, parse_condition
from workbench.model.timeline.search import search
from workbench.model.scenarios.scenario import scenario_from_records
from workbench.model.timeline.runner import Runner

CONFIG = {"components": ["full", "swa"], "page_size": 1, "kv_size": 24, "sliding_window": 2, "swa_kv_size": 24,
          "session_radix_cache": True}
STEPS = [
    {"op": "session_open", "session": "s1"},                                       # 1 names s1
    {"op": "session_open", "session": "s2", "streaming": True},                    # 2 names s2
    {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4], "session": "s1"},  # 3 names s1
    {"op": "req_decode", "req": "r1", "tokens": [5]},                              # 4 runs r1 (in s1)
    {"op": "stream_turn", "req": "t1", "tokens": [7, 8], "session": "s2"},        # 5 names s2
    {"op": "insert", "key": [9, 9, 9]},                                            # 6 nobody's
    {"op": "release", "req": "r1"},                                                # 7 ends r1: s1's tag events
    {"op": "release", "req": "t1"},                                                # 8 ends t1: s2's slot keeps it
    {"op": "evict", "full": 3},                                                    # 9 names no session
    {"op": "session_release", "session": "s1"},                                    # 10 names s1
]


@pytest.fixture(scope="module")
def timeline():
    t = Runner(scenario_from_records({"schema": 1, "scenario": {"name": "b"}, "config": CONFIG}, STEPS)).run()
    assert t.passed and not any(r.error for r in t.records)
    return t


def at(timeline, text: str) -> list[int]:
    condition = parse_condition(text, CONFIG["components"])
    return [i for i in range(1, len(timeline) + 1) if holds(timeline, condition, i)]


def test_session_term_finds_the_steps_that_concern_the_session(timeline):
    assert at(timeline, "session=s1") == [1, 3, 4, 7, 10]
    assert at(timeline, "session=s2") == [2, 5, 8]
    assert at(timeline, "session=s3") == []


def test_session_term_combines_with_the_other_terms(timeline):
    assert at(timeline, "session=s1 event=session_leaf") == [7, 10]
    assert at(timeline, "session=s1 cause=session_close") == [10]
    assert at(timeline, "session=s2 event=slot") == [5, 8]
    assert at(timeline, "session=s1 op=release") == [7]
    assert search(timeline, [parse_condition("session=s1", CONFIG["components"])], 4)[0] == 7
    assert search(timeline, [parse_condition("session=s2", CONFIG["components"])], 8, forward=False)[0] == 5


def test_session_term_takes_only_equals():
    assert parse_condition("session=s1").session == "s1"
    with pytest.raises(ConditionError, match="session takes '='"):
        parse_condition("session>s1")


def test_urc_run_until_a_session_step(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text('schema = 1\n[scenario]\nname = "s"\n[config]\ncomponents = ["full"]\npage_size = 1\n'
                    'kv_size = 16\nsession_radix_cache = true\n[[step]]\nop = "insert"\nkey = [1, 2]\n'
                    '[[step]]\nop = "session_open"\nsession = "s1"\n')
    code, out, _ = urc(capsys, "run", str(path), "--until", "session=s1")
    assert code == 0 and "step 2 (session_open" in out
