"""The fuzzer: the shrinker on its own, the generator (valid, deterministic), a short
seeded fuzz of the unfaulted cache per scale config (the CI share of the 10⁶-op
benchmark), and ``urc fuzz`` end to end: a failure shrunk to a scenario file that
fails ``urc run`` the same way and passes with ``faults = []``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from urc_util import urc
from workbench.model.fuzzing.sweep import SCALE_CONFIGS
from workbench.model.fuzzing.fuzz import (FuzzConfig, LockstepRun, OpGenerator, configs_for, fuzz, reproduce,
                                  sanity_check_would_catch)
from workbench.model.scenarios.scenario import load_scenario
from workbench.model.fuzzing.shrink import Shrinker, renumber

# ---- the shrinker --------------------------------------------------------------------------------


def noisy_steps(n: int = 40) -> list[dict]:
    steps = [{"op": "insert", "key": [9, 8, 7, 6, 5, 4][: 1 + i % 6]} for i in range(n)]
    steps[7] = {"op": "match", "key": [5, 1, 2, 9], "as": "x7"}
    steps[30] = {"op": "evict", "full": 17}
    return steps


def fails(steps: list[dict]) -> bool:
    """A failure that needs a match whose key holds 1 then 2, and a later evict of ≥ 3."""
    seen_match = False
    for step in steps:
        if step["op"] == "match" and any(a == 1 and b == 2 for a, b in zip(step["key"], step["key"][1:])):
            seen_match = True
        if seen_match and step["op"] == "evict" and step.get("full", 0) >= 3:
            return True
    return False


def test_shrink_keeps_only_what_the_failure_needs_and_renumbers():
    shrinker = Shrinker(fails)
    small = shrinker.shrink(noisy_steps())
    assert fails(small) and shrinker.runs > 0
    assert small == [{"op": "match", "key": [1, 2], "as": "m1"}, {"op": "evict", "full": 3}]


def test_shrink_respects_its_time_budget():
    calls = []

    def slow_fails(steps):
        calls.append(1)
        return fails(steps)

    Shrinker(slow_fails, budget_s=0.0).shrink(noisy_steps())
    assert len(calls) <= 2  # out of time at once: at most the renumbered candidate is tried


def test_renumber_keeps_structure():
    steps = [{"op": "match", "key": [7, 7, 3], "as": "foo"}, {"op": "lock", "match": "foo", "as": "bar"},
             {"op": "unlock", "lock": "bar"}, {"op": "req_prefill", "req": "zz", "tokens": [3, 9]},
             {"op": "match", "key": [9], "as": "q", "expect": {"full_lock_ref": {"foo": 1}}}]
    assert renumber(steps) == [
        {"op": "match", "key": [1, 1, 2], "as": "m1"}, {"op": "lock", "match": "m1", "as": "L1"},
        {"op": "unlock", "lock": "L1"}, {"op": "req_prefill", "req": "r1", "tokens": [2, 3]},
        {"op": "match", "key": [3], "as": "m2", "expect": {"full_lock_ref": {"m1": 1}}}]


# ---- generation and the unfaulted cache -------------------------------------------------------------


def test_generation_is_deterministic_per_seed():
    config = FuzzConfig(("full", "swa", "mamba"), 4, 2)
    gen_a, gen_b, gen_c = OpGenerator(config, "3:0"), OpGenerator(config, "3:0"), OpGenerator(config, "4:0")
    a = [gen_a.next_step() for _ in range(300)]
    assert a == [gen_b.next_step() for _ in range(300)]
    assert a != [gen_c.next_step() for _ in range(300)]
    assert {s["op"] for s in a} >= {"insert", "match", "lock", "unlock", "evict", "req_prefill", "req_decode",
                                    "checkpoint", "release", "release_window"}


@pytest.mark.parametrize("config", SCALE_CONFIGS, ids=lambda c: c.label())
def test_short_seeded_fuzz_of_the_unfaulted_cache_finds_nothing(config):
    result = fuzz(config, seed=7, steps=1200, episode_steps=600)
    assert result.finding is None, result.finding
    assert result.steps_run == 1200 and result.episode == 1


def test_configs_for_a_fault_carry_its_components():
    assert [c.label() for c in configs_for(("swa",))] == ["Full+SWA p1 w4", "Full+SWA p4 w2", "Full+SWA p16 w16",
                                                          "Full+SWA+Mamba p1 w4"]
    assert all(c.components[0] == "full" for c in configs_for(()))


# ---- a fault end to end ----------------------------------------------------------------------------


FAULT = "evictable-double-count"  # a Full fault: found in a few dozen steps on Full p1


@pytest.fixture(scope="module")
def found():
    config = FuzzConfig(("full",), 1, faults=(FAULT,))
    for seed in range(5):
        result = fuzz(config, seed, 2000)
        if result.finding is not None:
            return result
    pytest.fail(f"{FAULT} was not flagged in 5 seeds of 2,000 steps")


def test_a_fault_is_flagged_where_it_first_acts(found):
    assert found.first_fired is not None and found.finding.step == found.first_fired
    assert reproduce(found.config, found.raw_steps[: found.finding.step]) == found.finding


def test_urc_fuzz_writes_a_shrunk_scenario_that_fails_the_same_way(capsys, tmp_path, monkeypatch, found):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "fuzz", "--fault", FAULT, "--seed", str(found.seed), "--steps", "2000",
                       "-o", "repro.toml", "--trace", "run.jsonl")
    assert rc == 1, err
    assert out.startswith(f"FAIL Full p1, seed {found.seed}: {found.finding.check}")
    scenario = load_scenario("repro.toml")
    assert scenario.config["faults"] == [FAULT] and 1 <= len(scenario.steps) <= 10
    rc, out, _ = urc(capsys, "run", "repro.toml")
    assert rc == 1 and found.finding.name in out
    Path("clean.toml").write_text(Path("repro.toml").read_text().replace(f'faults = ["{FAULT}"]', "faults = []"))
    assert urc(capsys, "run", "clean.toml")[0] == 0
    trace = load_scenario("run.jsonl")
    assert len(trace.steps) == found.finding.step  # the failing episode as run, up to the failure
    rc, _, err = urc(capsys, "fuzz", "--fault", FAULT, "--seed", str(found.seed), "--steps", "2000", "-o", "repro.toml")
    assert rc == 2 and "file exists" in err  # never over a file without --force


def test_urc_fuzz_without_a_failure_says_how_far_it_got(capsys):
    rc, out, _ = urc(capsys, "fuzz", "--config", "full,mamba", "--steps", "300", "--seed", "1")
    assert rc == 0 and out.startswith("no failure in 300 steps (Full+Mamba p1, seed 1;")


def test_list_faults_prints_one_fault_per_line_name_first(capsys):
    from cache.faults import catalogue

    rc, out, _ = urc(capsys, "fuzz", "--list-faults")
    lines = out.splitlines()
    assert rc == 0 and [line.split("\t")[0] for line in lines] == list(catalogue())
    assert len(lines) >= 15 and all(len(line.split("\t")) == 4 for line in lines)


@pytest.mark.parametrize("argv, says", [
    (["--steps", "0"], "--steps must be a positive int"),
    (["--page-size", "-4"], "--page-size must be a positive int"),
    (["--fault", "nosuch"], "unknown fault 'nosuch'"),
    (["--config", "full", "--fault", "swa-recovery-stale-mapping"], "needs the swa component"),
    (["--faults", "all", "--trace", "x.jsonl"], "leave out --fault and --trace"),
    (["--faults", "all", "-o", "nosuchdir"], "-o names an existing directory"),
    (["--config", "full,swa", "--page-size", "3", "--kv-size", "10"], "multiple of page_size"),
    (["--faults", "some"], "invalid choice"),
])
def test_bad_fuzz_arguments_exit_2(capsys, argv, says):
    rc, out, err = urc(capsys, "fuzz", *argv)
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1


def test_a_counters_and_lru_check_sees_only_its_own_families():
    config = FuzzConfig(("full",), 1)
    run = LockstepRun(config)
    record = run.step({"op": "insert", "key": [1, 2]})
    assert not sanity_check_would_catch(record)
    from cache.checks.invariants import Violation

    for name, caught in (("counter.evictable", True), ("lru.links", True), ("pool.full.balance", True),
                         ("lock.negative", False), ("match.fingerprint", False)):
        assert sanity_check_would_catch(dataclasses.replace(record, violations=(Violation(name, "x"),))) is caught


def test_the_fuzzer_draws_the_host_ops_only_with_a_host_tier():
    from workbench.model.ops.host import EVICT_HOST, FLUSH, LOAD_BACK

    host_ops = {LOAD_BACK.name, EVICT_HOST.name, FLUSH.name}
    with_host = OpGenerator(FuzzConfig(("full", "swa", "mamba"), hicache="write_back"), seed=1)
    assert host_ops <= {with_host.next_step()["op"] for _ in range(400)}
    without = OpGenerator(FuzzConfig(("full", "swa", "mamba")), seed=1)
    assert not host_ops & {without.next_step()["op"] for _ in range(400)}
    result = fuzz(FuzzConfig(("full", "swa", "mamba"), hicache="write_back"), seed=1, steps=600)
    assert result.finding is None and result.steps_run == 600


def test_the_generator_learns_what_our_cache_refused():
    """A decode refused for want of room decoded nothing, and a streaming turn refused
    before admission never ran: told so, the generator draws no stop past a request's
    real output and sends no turn into a session whose turn still runs (which SGLang
    would reject and then let a third turn share the running one's record)."""
    from workbench.model.fuzzing.fuzz import run_episode

    result = run_episode(FuzzConfig(("full",), 1, sessions=True), 1, 1, 700)
    errors = [step.get("expect_error", "") for step in result.run_steps]
    assert result.finding is None, result.finding
    assert not [e for e in errors if "output tokens" in e]



def test_a_streaming_turn_that_has_decoded_is_never_checkpointed():
    """SGLang checkpoints a request after an extend, never while it decodes: a streaming
    turn's checkpoint after decoding would publish output past what the next turn's
    history keeps (cut at max_new_tokens), and that turn would write its KV into a page
    a tree node owns. The generator draws no such checkpoint."""
    gen = OpGenerator(FuzzConfig(("full",), 4, sessions=True), seed=0)
    turns, decoded, checkpoints = set(), set(), 0
    for _ in range(6000):
        step = gen.next_step()
        if step["op"] == "stream_turn":
            turns.add(step["req"])
        elif step["op"] == "req_decode" and step["req"] in turns:
            decoded.add(step["req"])
        elif step["op"] == "checkpoint":
            checkpoints += step["req"] in turns
            assert step["req"] not in decoded, step
    assert len(decoded) >= 5 and checkpoints >= 5
