"""The session faults of the catalogue (cache/faults/sessions.py): each one, turned on in
the bug scenario that shows the correct behaviour, fires and is caught at the step where
it fires (by a session or pool invariant, or by the pool counts the step expects);
without it the same steps pass.

Measured (first step the fault fired = first flagged / what names it / a later expectation):

  late-finish-retags-closed-session  4 (r1 finishes after s1 closed): session.closed;
                                     step 7 prefix_len (r1's prompt survives the eviction)
  close-drops-shared-prefix-refs     7 (s1 closes): session.ref_balance;
                                     step 10 prefix_len (s2's shared prompt evicted)
  streaming-release-keeps-overshoot  4 (t1 finishes at 1 of its 3 outputs): full_available
                                     (2 slots kept); step 7 match.fingerprint (t2 borrowed them)
  slot-lock-outlives-close           5 (s1 closes): session.closed_holds_slot;
                                     step 5 full_protected (the prompt stays locked)
"""

from __future__ import annotations

import pytest

from cache.faults import catalogue
from fault_util import BUGS, BugCase as Case, assert_imports_no_torch, bug_case_tests, cited_fault, run_with_fault
from workbench.model.fuzzing.fuzz import fuzz
from workbench.model.fuzzing.sweep import SCALE_CONFIGS, SESSION_CONFIGS, configs_for
from workbench.model.scenarios.scenario import load_scenario
from workbench.model.timeline.runner import Runner


CASES = [
    Case("late-finish-retags-closed-session", "sgl-project/sglang#29173",
         "sglang-29173-late-finish-retags-closed-session", 4, "session.closed", "prefix_len", 7),
    Case("close-drops-shared-prefix-refs", "sgl-project/sglang#27058",
         "sglang-27058-close-drops-shared-prefix-refs", 7, "session.ref_balance", "prefix_len", 10),
    Case("streaming-release-keeps-overshoot", "sgl-project/sglang#22897",
         "sglang-22897-streaming-release-keeps-overshoot", 4, "", "full_available"),
    Case("slot-lock-outlives-close", "sgl-project/sglang#27024",
         "sglang-27024-slot-lock-outlives-close", 5, "session.closed_holds_slot", "full_protected", 5),
]


def test_catalogue_entries_cite_their_source_need_sessions_and_the_scenario_says_it_too():
    known = catalogue()
    assert {c.fault for c in CASES} == {f.name for f in known.values() if f.sessions}
    for case in CASES:
        fault = cited_fault(case)
        assert fault.components == ("full",) and fault.sessions


def test_the_sessions_faults_module_imports_no_torch():
    assert_imports_no_torch("cache.faults.sessions")


# each case: its scenario passes without the fault; with it, the fault is caught where it fires
test_scenario_passes_without_the_fault, test_fault_fires_and_is_caught_where_it_fires = bug_case_tests(CASES)


def test_the_kept_overshoot_is_borrowed_and_read_back_as_the_wrong_kv():
    """With the record left untrimmed, t2 borrows 7 tokens, not 5, and the match of its
    history returns the two slots holding the dropped output's KV: the only invariant
    the run trips."""
    timeline, fired = run_with_fault("sglang-22897-streaming-release-keeps-overshoot",
                                     "streaming-release-keeps-overshoot")
    assert fired == [4]
    assert [(r.index, [v.name for v in r.violations]) for r in timeline.records if r.violations] == [
        (7, ["match.fingerprint"])]
    assert {f.field for f in timeline.records[4].failures} == {"prefix_len"}


def test_sglangs_rejected_turn_lets_a_third_turn_share_the_record_and_that_is_flagged(tmp_path):
    """The bug scenario's third-turn form: after t3's rejection cleared the flag, t4 is
    accepted on the record t2 runs on (SGLang 0.5.23 does the same); ours flags it."""
    text = (BUGS / "sglang-v0523-rejected-turn-clears-inflight.toml").read_text()
    head = text.split('[[step]]\nop = "session_release"')[0]
    path = tmp_path / "third_turn.toml"
    path.write_text(head + '[[step]]\nop = "stream_turn"\nreq = "t4"\ntokens = [12]\nsession = "s1"\n'
                    'expect = { aborted = false, prefix_len = 7, borrowed = true, requests = 2 }\n')
    timeline = Runner(load_scenario(path)).run()
    *before, last = timeline.records
    assert all(r.passed for r in before) and not last.failures
    assert {v.name for v in last.violations} == {"session.record_shared"}


def test_session_faults_are_searched_on_the_session_configs_only():
    assert configs_for(("full",), sessions=True) == sorted(SESSION_CONFIGS, key=lambda c: len(c.components))
    assert all(c.sessions for c in SESSION_CONFIGS) and not any(c.sessions for c in SCALE_CONFIGS)
    assert configs_for(("full",)) == sorted(SCALE_CONFIGS, key=lambda c: len(c.components))
    assert [c.label() for c in configs_for(("mamba",), sessions=True)] == ["Full+Mamba p1 sessions"]


@pytest.mark.parametrize("config", SESSION_CONFIGS, ids=lambda c: c.label())
def test_short_seeded_fuzz_of_the_unfaulted_cache_with_sessions_finds_nothing(config):
    result = fuzz(config, seed=7, steps=600, episode_steps=300)
    assert result.finding is None, result.finding
    assert result.steps_run == 600 and result.episode == 1
