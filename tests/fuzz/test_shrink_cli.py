"""``urc shrink``: a failing run from a file (scenario, JSONL trace, stored run) cut down
to a minimal scenario that fails ``urc run`` the same way, under the usual output
rules; the shrinker's Ctrl-C and name-aware chunks; ``urc fuzz --time-budget`` drawing
seed after seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from urc_util import urc
from workbench.model.fuzzing.fuzz import first_finding
from workbench.model.fuzzing.shrink import Shrinker, dependents_of, pressure_steps
from workbench.model.scenarios.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
REPRO = ROOT / "scenarios" / "fuzz" / "close-drops-shared-prefix-refs.toml"


def padded_trace(path: Path, noise: int = 60) -> Path:
    """The fault's 5-step repro after ``noise`` unrelated steps of other names: inserts,
    matches, locks and unlocks, a refused unlock, and expectations a shorter run breaks."""
    repro = load_scenario(REPRO)
    header = {"schema": 1, "scenario": {"name": "padded"}, "config": repro.config}
    steps = []
    for i in range(noise):
        key = [7 + i % 5, 8 + i % 3, 9]
        steps.append({"op": "insert", "key": key})
        if i % 10 == 3:
            steps.append({"op": "match", "key": key, "as": f"x{i}"})
            steps.append({"op": "lock", "match": f"x{i}", "as": f"l{i}"})
            steps.append({"op": "check", "expect": {"nodes": len({tuple(s["key"]) for s in steps if "key" in s}) + 99}})
            steps.append({"op": "unlock", "lock": f"l{i}"})
            steps.append({"op": "unlock", "lock": f"l{i}", "expect_error": "not held"})
    steps = [s for s in steps if s["op"] != "check"]  # (the noise itself passes)
    steps += [{k: v for k, v in s.raw.items()} for s in repro.steps]
    path.write_text("\n".join(json.dumps(x) for x in [header, *steps]) + "\n")
    return path


def test_a_trace_shrinks_to_the_repro_with_each_step_saying_its_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trace = padded_trace(tmp_path / "trace.jsonl")
    before = trace.read_bytes()
    rc, out, err = urc(capsys, "shrink", "trace.jsonl", "--json")
    assert rc == 0, err
    summary = json.loads(out)
    assert summary["target"] == "fails invariant session.ref_balance" and summary["steps"] <= 5
    assert summary["fails_the_same_way"]
    written = Path("trace-shrunk.toml").read_text()
    shrunk = load_scenario("trace-shrunk.toml")
    assert first_finding(shrunk).check == "invariant session.ref_balance"
    original = load_scenario(str(trace)).config  # the input's config, its pool as small as the repro allows
    assert {**shrunk.config, "kv_size": original["kv_size"]} == original and shrunk.config["kv_size"] < original["kv_size"]
    lines = [int(line.rsplit(":", 1)[1]) for line in written.splitlines() if line.startswith("# from trace.jsonl:")]
    assert len(lines) == len(shrunk.steps) and lines == sorted(lines) and min(lines) > 60  # the repro's own lines
    assert trace.read_bytes() == before  # the input untouched


def test_it_never_writes_over_a_file_without_force(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    padded_trace(tmp_path / "trace.jsonl", noise=5)
    Path("taken.toml").write_text("mine")
    rc, out, err = urc(capsys, "shrink", "trace.jsonl", "-o", "taken.toml")
    assert rc == 2 and "taken.toml" in err and Path("taken.toml").read_text() == "mine"
    rc, out, err = urc(capsys, "shrink", "trace.jsonl", "-o", "trace.jsonl", "--force")
    assert rc == 2 and "trace.jsonl" in err  # never its own input, even forced
    rc, out, err = urc(capsys, "shrink", "trace.jsonl", "-o", "taken.toml", "--force", "--test", "t_repro.py")
    assert rc == 0, err
    assert first_finding(load_scenario("taken.toml")) is not None
    assert "def test_" in Path("t_repro.py").read_text()


def test_a_passing_file_has_nothing_to_shrink(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "shrink", str(ROOT / "scenarios" / "smoke.toml"))
    assert rc == 1 and "nothing to shrink" in out and list(tmp_path.iterdir()) == []


def test_until_keeps_a_condition_and_refuses_one_that_never_holds(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    padded_trace(tmp_path / "trace.jsonl", noise=30)
    rc, out, err = urc(capsys, "shrink", "trace.jsonl", "--until", "nodes>=3", "--json")
    assert rc == 0, err
    shrunk = Path("trace-shrunk.toml")
    assert json.loads(out)["steps"] <= 3
    rc, out, err = urc(capsys, "run", str(shrunk), "--until", "nodes>=3")
    assert rc == 0 and "stopped at step" in out
    shrunk.unlink()
    rc, out, err = urc(capsys, "shrink", "trace.jsonl", "--until", "nodes>=500")
    assert rc == 2 and "never holds" in err and not shrunk.exists()
    rc, out, err = urc(capsys, "shrink", "trace.jsonl", "--until", "bogus<1")
    assert rc == 2 and err.count("\n") == 1 and not shrunk.exists()


def test_against_without_sglang_is_one_line_and_writes_nothing(capsys, tmp_path, monkeypatch):
    from workbench.bridge import sglang_env

    def missing(*args, **kwargs):
        raise sglang_env.BridgeError("needs SGLang 0.5.23: pip install sglang==0.5.23")

    monkeypatch.setattr(sglang_env, "check_version", missing)
    monkeypatch.chdir(tmp_path)
    padded_trace(tmp_path / "trace.jsonl", noise=5)
    rc, out, err = urc(capsys, "shrink", "trace.jsonl", "--against", "sglang")
    assert rc == 2 and err.count("\n") == 1 and "--against sglang" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.jsonl"]


def test_a_stored_run_shrinks_from_its_indexed_failure(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    padded_trace(tmp_path / "trace.jsonl", noise=20)
    rc, out, err = urc(capsys, "run", "trace.jsonl", "--store", "run.urcdb")
    assert rc == 1, err
    rc, out, err = urc(capsys, "shrink", "run.urcdb", "-o", "small.toml", "--json")
    assert rc == 0, err
    assert first_finding(load_scenario("small.toml")).check == "invariant session.ref_balance"


# ---- the shrinker ---------------------------------------------------------------------------------

def test_ctrl_c_keeps_the_best_so_far():
    steps = [{"op": "insert", "key": [i + 1]} for i in range(40)]
    calls = []

    def fails(candidate):
        calls.append(len(candidate))
        if len(calls) == 6:
            raise KeyboardInterrupt
        return any(s["key"] == [40] for s in candidate)

    shrinker = Shrinker(fails)
    best = shrinker.shrink(steps)
    assert shrinker.interrupted and len(best) < 40 and any(s["key"] == [40] for s in best)


def test_a_chunk_goes_with_the_steps_that_use_its_names():
    steps = [{"op": "insert", "key": [1]}, {"op": "match", "key": [1], "as": "m"},
             {"op": "lock", "match": "m", "as": "l"}, {"op": "insert", "key": [2]},
             {"op": "unlock", "lock": "l"}, {"op": "match", "key": [2], "as": "m"},
             {"op": "lock", "match": "m", "as": "l2"}]
    # the first match's lock and unlock go with it; the later match of the same name is its own
    assert dependents_of(steps, [1]) == {1, 2, 4}
    assert dependents_of(steps, [5]) == {5, 6}


def test_fuzz_time_budget_draws_seed_after_seed(capsys):
    rc, out, err = urc(capsys, "fuzz", "--config", "full", "--steps", "30", "--time-budget", "3", "--jobs", "1",
                       "--json")
    report = json.loads(out)
    assert rc == 0, err
    assert report["seeds"] > 1 and report["steps"] >= 30 * (report["seeds"] - 1)


@pytest.mark.parametrize("argv, says", [(["--budget", "0"], "--budget"), (["--until", "x>1", "--against", "sglang"],
                                                                            "one")])
def test_bad_shrink_arguments_exit_2(capsys, tmp_path, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    padded_trace(tmp_path / "trace.jsonl", noise=2)
    rc, out, err = urc(capsys, "shrink", "trace.jsonl", *argv)
    assert rc == 2 and says in err


def test_bench_shrink_cuts_the_planted_fault_out_of_its_trace(capsys):
    rc, out, err = urc(capsys, "bench", "--shrink", "--steps", "300", "--json")
    report = json.loads(out)
    assert rc == 0, err
    assert report["target_step"] == report["trace_steps"] == 305 and report["shrunk_steps"] <= 10


def test_a_slice_keeps_the_steps_that_define_the_names_it_uses():
    from workbench.model.fuzzing.shrink import with_definers

    steps = [{"op": "insert", "key": [1]}, {"op": "match", "key": [1], "as": "m"},
             {"op": "insert", "key": [2]}, {"op": "lock", "match": "m", "as": "l"},
             {"op": "insert", "key": [3]}, {"op": "unlock", "lock": "l"}]
    assert with_definers(steps, [5]) == [1, 3, 5]  # the unlock's lock, and that lock's match
    assert with_definers(steps, [4, 5]) == [1, 3, 4, 5]


def test_pressure_steps_replace_the_steps_that_only_filled_the_pools():
    """A failure that needs node [9] evicted: twenty filler inserts did it; one evict
    before the failing step does it too, and the filler goes."""
    filler = [{"op": "insert", "key": [i + 10]} for i in range(20)]
    steps = [{"op": "insert", "key": [9]}, *filler, {"op": "check", "key": [9]}]

    def evicted(candidate) -> bool:  # [9] is gone when 20 units of pressure came after it
        pressure = sum(s.get("full", 1) for s in candidate[1:-1])
        return candidate[0] == {"op": "insert", "key": [9]} and candidate[-1]["op"] == "check" and pressure >= 20

    without = Shrinker(evicted).shrink(steps)
    with_pressure = Shrinker(evicted, pressure=pressure_steps({"components": ["full"], "kv_size": 20})).shrink(steps)
    assert len(without) == 22
    assert with_pressure == [steps[0], {"op": "evict", "full": 20}, steps[-1]]


def test_urc_shrink_cuts_a_repro_whose_steps_filled_the_host_tier(capsys, tmp_path):
    """The fault catalogue's longest old repro (a storage prefetch refilling a page the
    host lost: 32 steps of inserts and requests) shrinks to the evictions it needed."""
    out = tmp_path / "small.toml"
    rc, stdout, err = urc(capsys, "shrink", str(ROOT / "tests" / "fuzz" / "data" / "refill-repro-32-steps.toml"),
                          "-o", str(out), "--budget", "60")
    assert rc == 0, err
    small = load_scenario(out)
    assert len(small.steps) <= 10
    assert [s.op for s in small.steps][-1] == "prefetch" and {"evict", "evict_host"} <= {s.op for s in small.steps}
    assert first_finding(small) is not None and first_finding(small).check == "invariant kv_events.router_view"


def test_a_divergence_keeps_no_candidate_our_own_checks_reject_before_it():
    """Shrinking a divergence must not pass through a state our invariants flag (a
    known upstream bug's, say): that candidate diverges for another reason."""
    from workbench.model.fuzzing.fuzz import Finding
    from workbench.model.fuzzing.shrink_file import DIVERGENCE, Target, header_of, oracle, steps_upto

    repro = load_scenario(ROOT / "scenarios" / "fuzz" / "swa-recovery-stale-mapping.toml")  # swa.orphan at its last step
    flagged = len(repro.steps)
    steps = steps_upto(repro, flagged) + [{"op": "check"}]

    def diverging_at(step):
        return lambda scenario: Finding("divergence", "pools.full.available", step, "")

    at_the_flag = Target(DIVERGENCE, flagged, Finding("divergence", "pools.full.available", flagged, ""))
    assert oracle(at_the_flag, header_of(repro), diverging_at(flagged))(steps)
    after_it = Target(DIVERGENCE, flagged + 1, Finding("divergence", "pools.full.available", flagged + 1, ""))
    assert not oracle(after_it, header_of(repro), diverging_at(flagged + 1))(steps)
