"""``why`` about a request (``why_request``, ``urc why --request``): which step changed
its prefix and lock and why, which step freed its tail and why, asserted word for word
on small scenarios run through the Runner."""

from __future__ import annotations

import pytest

from urc_util import urc
from workbench.model.debugging.why_request import parse_request_question, request_history, why_request
from workbench.model.scenarios.scenario import scenario_from_records
from workbench.model.timeline.runner import Runner

FULL = {"components": ["full"], "page_size": 4, "kv_size": 128}
HYBRID4 = {"components": ["full", "swa", "mamba"], "page_size": 4, "kv_size": 512, "sliding_window": 8,
           "swa_kv_size": 512, "mamba_size": 16}


def run(config: dict, *steps: dict):
    timeline = Runner(scenario_from_records({"schema": 1, "scenario": {"name": "t"}, "config": config},
                                            list(steps))).run()
    assert timeline.passed and not any(r.error for r in timeline.records)
    return timeline


@pytest.fixture(scope="module")
def full_story():
    """r1 admitted on an empty cache, decodes, checkpoints (page 4: 8 of 10 cached), decodes
    again, then ends; r2 shares its prompt."""
    return run(FULL,
               {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4, 5, 6]},
               {"op": "req_decode", "req": "r1", "tokens": [7, 8, 9, 10]},
               {"op": "checkpoint", "req": "r1"},
               {"op": "req_prefill", "req": "r2", "tokens": [1, 2, 3, 4, 5, 6, 7, 8, 50]},
               {"op": "release", "req": "r1"})


def test_why_the_prefix_grew_names_the_checkpoint_and_the_lock_it_moved(full_story):
    node = full_story.state_after(3).requests[0].lock_node
    answer = why_request(full_story, 4, "r1", "prefix")
    assert answer.title == "request r1 after step 4: its prefix"
    assert answer.lines == (
        f"running: prefix 8 of 10 committed (6-token prompt), inserted 8, lock on #{node} (receipt 2)",
        "step 1 (req_prefill r1, line 2): admitted with prefix 0: its match found nothing cached "
        "(why the match stopped there: why at step 1)",
        "step 3 (checkpoint r1, line 4): prefix grew 0 → 8: the checkpoint cached 8 more tokens in the tree; "
        f"its lock moved from #0 to #{node}; it had inserted 0 tokens, now 8",
    )
    assert answer.steps == (1, 3)


def test_a_request_admitted_on_a_cached_prefix_says_what_its_match_found(full_story):
    answer = why_request(full_story, 4, "r2", "prefix")
    node = full_story.state_after(4).requests[1].lock_node
    assert answer.lines[1] == ("step 4 (req_prefill r2, line 5): admitted with prefix 8: its match found 8 tokens "
                               f"cached and it locked node #{node} (why the match stopped there: why at step 4)")
    assert answer.lines[2] == "no later step changed its prefix or moved its lock"


def test_why_the_tail_was_freed_names_the_release_and_its_cause(full_story):
    answer = why_request(full_story, 5, "r1", "tail")
    assert answer.lines == (
        "ended at step 5 (release r1, line 6)",
        "step 5 (release r1, line 6): release freed 2 full slots [cause tail]: its tail of 2 slots: "
        "the committed tokens past the 8 it cached (10 committed) — nothing could match them",
    )
    assert answer.steps == (5,)
    before = why_request(full_story, 4, "r1", "tail")
    assert before.lines[-1] == "its tail was not freed up to this step: it holds 2 own slots past its prefix of 8"


def test_the_whole_story_lists_every_step_that_changed_the_request(full_story):
    answer = why_request(full_story, 5, "r1")
    assert [line.split(":")[0] for line in answer.lines[1:]] == [
        "step 1 (req_prefill r1, line 2)", "step 2 (req_decode r1, line 3)", "step 3 (checkpoint r1, line 4)",
        "step 5 (release r1, line 6)"]  # r2's admission (step 4) did not touch r1
    assert "committed grew 6 → 10 (+4)" in answer.lines[2]
    assert answer.lines[4].endswith("ended: it held 2 own slots past a prefix of 8, lock on #"
                                    f"{full_story.state_after(3).requests[0].lock_node} released; "
                                    "freed 2 slots of full [tail]")


def test_the_sliding_window_and_duplicates_are_named_as_causes():
    timeline = run(HYBRID4,
                   {"op": "req_prefill", "req": "r1", "tokens": list(range(1, 71))},
                   {"op": "req_decode", "req": "r1", "tokens": [5, 6, 7], "slide_window": True},
                   {"op": "checkpoint", "req": "r1"},
                   {"op": "req_prefill", "req": "r2", "tokens": list(range(1, 67))},
                   {"op": "release", "req": "r1"},
                   {"op": "release", "req": "r2"})
    assert why_request(timeline, 2, "r1", "tail").lines[1] == (
        "step 2 (req_decode r1, line 3): the req_decode freed 56 swa slots [cause window]: "
        "it slid out of the sliding window")
    r2 = why_request(timeline, 6, "r2", "tail").lines  # r2 matched r1's 64 (its window kept behind r1's state)
    assert r2[-1].endswith("its tail of 2 slots: the committed tokens past the 64 it cached (66 committed) — "
                           "nothing could match them")
    twins = run(FULL, {"op": "req_prefill", "req": "a", "tokens": [1, 2, 3, 4]},
                {"op": "req_prefill", "req": "b", "tokens": [1, 2, 3, 4]},
                {"op": "release", "req": "a"}, {"op": "release", "req": "b"})
    assert ("step 4 (release b, line 5): release freed 4 full slots [cause duplicate]: the tree already "
            "held those tokens, so its own copies went back to the pool") in why_request(twins, 4, "b", "tail").lines


def test_a_reused_name_tells_only_its_latest_life():
    timeline = run(FULL, {"op": "req_prefill", "req": "r", "tokens": [1, 2, 3]}, {"op": "release", "req": "r"},
                   {"op": "req_prefill", "req": "r", "tokens": [9, 9, 9, 9, 9]})
    assert [s for s, _ in request_history(timeline, 3, "r")] == [3]


def test_bad_questions_are_one_line_value_errors(full_story):
    with pytest.raises(ValueError, match=r"no request 'r9' up to step 5; requests so far: r1, r2"):
        why_request(full_story, 5, "r9")
    with pytest.raises(ValueError, match="about must be one of prefix, tail"):
        why_request(full_story, 5, "r1", "lock")
    assert parse_request_question("r1 tail") == ("r1", "tail") and parse_request_question(" r1 ") == ("r1", None)
    with pytest.raises(ValueError, match="'RID prefix'"):
        parse_request_question("r1 lock")


def test_urc_why_asks_about_a_request(tmp_path, capsys):
    path = tmp_path / "r.toml"
    path.write_text('schema = 1\n[scenario]\nname = "r"\n[config]\ncomponents = ["full"]\npage_size = 4\n'
                    'kv_size = 64\n[[step]]\nop = "req_prefill"\nreq = "r1"\ntokens = [1, 2, 3, 4, 5, 6]\n'
                    '[[step]]\nop = "release"\nreq = "r1"\n')
    code, out, _ = urc(capsys, "why", str(path), "--request", "r1", "--about", "tail")
    assert code == 0 and "release freed 2 full slots [cause tail]" in out
    code, _, err = urc(capsys, "why", str(path), "--about", "tail")
    assert code == 2 and "--about needs --request" in err
