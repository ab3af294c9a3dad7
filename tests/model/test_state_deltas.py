"""``urc run --json --states`` writes each step's changes (JSON Lines, a whole state every
K steps) and ``state_deltas_read`` rebuilds from them exactly the states the whole-state
form (``--full-states``) writes: at every step of the shipped tours, at steps around
the keyframes of a generated trace, from a file an interrupted run cut mid-line; and
a file that is not one is refused in one line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from workbench.model.scenarios.errors import ScenarioError
from workbench.model.scenarios.scenario import load_scenario
from workbench.model.scenarios.workload import write_trace
from workbench.model.timeline.export import state_json
from workbench.model.timeline.runner import Runner
from workbench.model.timeline.state_deltas import KEYFRAME_EVERY, StateDeltaWriter
from workbench.model.timeline.state_deltas_read import state_at, states
from tests.urc_util import urc

ROOT = Path(__file__).resolve().parents[2]
TOURS = ["smoke", "tour", "tour_swa", "tour_mamba", "tour_sessions", "tour_hicache_hybrid", "tour_storage"]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def written(scenario, keyframe_every: int = KEYFRAME_EVERY, path: str = "states.jsonl"):
    """Run ``scenario`` with a delta writer into ``path``; the timeline, for its states."""
    stream = io.StringIO()
    runner = Runner(scenario)
    writer = StateDeltaWriter(stream, runner.timeline, keyframe_every)
    runner.timeline.on_step(writer.step)
    timeline = runner.run()
    writer.close()
    Path(path).write_text(stream.getvalue(), encoding="utf-8")
    return timeline


@pytest.mark.parametrize("name", TOURS)
def test_the_cli_deltas_rebuild_the_full_form_at_every_step(capsys, name):
    source = str(ROOT / "scenarios" / f"{name}.toml")
    rc, out, err = urc(capsys, "run", "--json", "--states", source)
    assert rc in (0, 1), err
    Path("run.jsonl").write_text(out, encoding="utf-8")
    rc, full, err = urc(capsys, "run", "--json", "--full-states", source)
    report = json.loads(full)[0]
    rebuilt = list(states("run.jsonl"))
    assert [i for i, _ in rebuilt] == list(range(len(report["steps"]) + 1))
    assert [state for _, state in rebuilt[1:]] == [step["state"] for step in report["steps"]]
    assert rebuilt[-1][1] == report["final_state"]
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["kind"] for line in lines] == ["run"] + ["step"] * len(report["steps"]) + ["end"]
    assert [{k: v for k, v in line.items() if k not in ("kind", "delta")} for line in lines[1:-1]] == \
        [{k: v for k, v in step.items() if k != "state"} for step in report["steps"]]
    assert lines[-1] == {"kind": "end", "passed": report["passed"], "steps": len(report["steps"])}


@pytest.mark.parametrize("name", ["tour_swa", "tour_mamba", "tour_sessions"])
def test_every_step_rebuilds_through_keyframes(name):
    """With a keyframe every 3 steps, ``state_at`` starts from the nearest one."""
    timeline = written(load_scenario(ROOT / "scenarios" / f"{name}.toml"), keyframe_every=3)
    kinds = [json.loads(line)["kind"] for line in Path("states.jsonl").read_text().splitlines()]
    assert kinds.count("keyframe") == len(timeline) // 3
    for step in range(len(timeline) + 1):
        assert state_at("states.jsonl", step) == state_json(timeline.state_after(step)), step


def test_a_generated_trace_rebuilds_around_its_keyframes():
    with open("trace.jsonl", "w", encoding="utf-8") as stream:
        write_trace(stream, 150, 0, ("full", "swa", "mamba"))
    timeline = written(load_scenario("trace.jsonl"))
    assert len(timeline) == 600
    text = Path("states.jsonl").read_text()
    whole = sum(len(json.dumps(state_json(timeline.state_after(i)))) for i in range(1, 601, 10)) * 10
    assert len(text) < whole / 10  # the whole-state form, estimated from every tenth step
    for step in (0, 1, 255, 256, 257, 511, 512, 599, 600):
        assert state_at("states.jsonl", step) == state_json(timeline.state_after(step)), step


def test_a_file_cut_mid_line_rebuilds_up_to_its_last_complete_step():
    timeline = written(load_scenario(ROOT / "scenarios" / "tour_swa.toml"), keyframe_every=4)
    lines = Path("states.jsonl").read_text().splitlines(keepends=True)
    kept = lines[:10]  # the header and steps 1..9
    Path("cut.jsonl").write_text("".join(kept) + lines[10][: len(lines[10]) // 2], encoding="utf-8")
    assert [i for i, _ in states("cut.jsonl")] == list(range(10))
    assert state_at("cut.jsonl", 9) == state_json(timeline.state_after(9))
    with pytest.raises(ScenarioError, match=r"no step 10: run 0 ends after step 9"):
        state_at("cut.jsonl", 10)


def test_more_runs_than_one_in_a_file(capsys):
    smoke, tour = (str(ROOT / "scenarios" / f"{n}.toml") for n in ("smoke", "tour"))
    rc, out, err = urc(capsys, "run", "--json", "--states", smoke, tour)
    Path("two.jsonl").write_text(out, encoding="utf-8")
    rc, full, err = urc(capsys, "run", "--json", "--full-states", tour)
    assert state_at("two.jsonl", 7, run=1) == json.loads(full)[0]["steps"][6]["state"]
    with pytest.raises(ScenarioError, match="no run 2: the file holds 2"):
        state_at("two.jsonl", 1, run=2)


def bad(name: str, text: str, match: str, step: int = 1) -> None:
    Path(name).write_text(text, encoding="utf-8")
    with pytest.raises(ScenarioError, match=match) as caught:
        state_at(name, step)
    assert "\n" not in str(caught.value) and str(caught.value).startswith(name)


def test_what_is_not_a_states_file_is_refused_in_one_line(capsys):
    written(load_scenario(ROOT / "scenarios" / "smoke.toml"))
    good = Path("states.jsonl").read_text().splitlines(keepends=True)
    bad("empty.jsonl", "", "empty: the first line must be a run header")
    bad("trace.jsonl", '{"schema": 1, "scenario": {}}\n', "1: not a urc states file")
    bad("toml.jsonl", (ROOT / "scenarios" / "smoke.toml").read_text(), "1: malformed JSON")
    rc, full, err = urc(capsys, "run", "--json", "--full-states", str(ROOT / "scenarios" / "smoke.toml"))
    bad("full.json", full, "1: not a urc states file: a JSON array")
    bad("garbage.jsonl", good[0] + "}{ not json\n" + "".join(good[1:]), ":2: malformed JSON")
    bad("version.jsonl", good[0].replace('"version":1', '"version":9') + "".join(good[1:]), "version 1 header")
    dropped = json.loads(good[2])
    dropped["delta"]["drop"] = [999]
    bad("drop.jsonl", good[0] + good[1] + json.dumps(dropped) + "\n", ":3: not a states line as urc writes it",
        step=2)
    bad("order.jsonl", good[0] + good[2], ":2: step 2 follows step 0")
    with pytest.raises(ScenarioError, match="no such file"):
        state_at("missing.jsonl", 1)
    with pytest.raises(ScenarioError, match="steps count from 0"):
        state_at("states.jsonl", -1)


def test_states_and_full_states_are_one_or_the_other(capsys):
    smoke = str(ROOT / "scenarios" / "smoke.toml")
    rc, out, err = urc(capsys, "run", "--json", "--states", smoke, smoke)  # a FILE after --states is a FILE
    heads = [json.loads(line) for line in out.splitlines() if line.startswith('{"kind":"run"')]
    assert rc == 0 and len(heads) == 2 and heads[0]["format"] == "urc-states"
    for argv, says in ((("--json", "--states", "--full-states"), "choose one"),
                       (("--full-states",), "only applies with --json")):
        rc, out, err = urc(capsys, "run", *argv, smoke)
        assert (rc, out, err.count("\n")) == (2, "", 1) and says in err, err


def test_a_node_outside_the_tree_is_said_at_its_line():
    written(load_scenario(ROOT / "scenarios" / "smoke.toml"))
    good = Path("states.jsonl").read_text().splitlines(keepends=True)
    step = json.loads(good[1])
    step["delta"]["nodes"] = [{"id": 50, "parent": 50, "key": [1], "components": {}}]  # its own parent
    bad("loop.jsonl", good[0] + json.dumps(step) + "\n", ":2: .*1 nodes are not under the root")


def test_the_states_bench_counts_each_form_and_jumps(capsys):
    rc, out, err = urc(capsys, "bench", "--states", "--requests", "30", "--steps", "40", "--json")
    report = json.loads(out)
    assert rc == 0 and report["trace"]["steps"] == 120
    assert report["states"]["bytes"] > 0 and report["json"]["bytes"] > 0
    assert report["full_states_first_40"]["bytes"] > report["states_first_40"]["bytes"] > 0
    assert len(report["state_at"]["steps"]) == 8 and report["state_at"]["max_ms"] > 0


def test_the_help_and_the_format_page_say_the_keyframe_interval():
    help_text = " ".join((ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8").split())
    page = (ROOT / "docs" / "reference" / "states-format.md").read_text(encoding="utf-8")
    assert f"every {KEYFRAME_EVERY}th step" in help_text and f"**K = {KEYFRAME_EVERY}**" in page
