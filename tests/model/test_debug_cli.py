"""``urc why`` and ``urc tui --follow`` headless: answers on stdout, bad input as one
line with exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from urc_util import urc
from workbench.model.timeline.runner import run_scenario
from workbench.model.debugging.why import why_match, why_node

ROOT = Path(__file__).resolve().parents[2]
TOUR_MAMBA = str(ROOT / "scenarios" / "tour_mamba.toml")
TOUR_SWA = str(ROOT / "scenarios" / "tour_swa.toml")


def test_urc_why_node_prints_the_model_answer(capsys):
    rc, out, err = urc(capsys, "why", TOUR_MAMBA, "--step", "13", "--node", "3")
    assert rc == 0, err
    assert out == why_node(run_scenario(TOUR_MAMBA), 13, 3).text() + "\n"
    assert "tombstoned at step 13 (evict swa=8" in out and "the cascade took its Mamba state" in out


def test_urc_why_without_a_node_explains_the_match(capsys):
    rc, out, err = urc(capsys, "why", TOUR_SWA, "--step", "11")
    assert rc == 0, err
    assert out == why_match(run_scenario(TOUR_SWA), 11).text() + "\n"
    assert "SWA accepts 12 tokens" in out and "sliding_window 4" in out


@pytest.mark.parametrize("argv, says", [
    (["--step", "99"], "--step must be between 0 and 15"),
    (["--step", "13", "--node", "999"], "999"),
    (["--step", "1"], "match"),  # step 1 is an insert: nothing to explain without a node
])
def test_urc_why_bad_input_is_one_line_exit_2(capsys, argv, says):
    rc, out, err = urc(capsys, "why", TOUR_MAMBA, *argv)
    assert rc == 2 and out == "" and says in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, says", [
    (["--follow", "x.toml"], "--follow reads a .jsonl trace file"),
    (["--follow", "-"], "--follow reads a .jsonl trace file"),
    (["--follow", "t.jsonl", TOUR_SWA], "--follow opens one trace"),
])
def test_tui_follow_bad_arguments(capsys, argv, says):
    rc, out, err = urc(capsys, "tui", *argv)
    assert rc == 2 and says in err


def test_tui_follow_a_trace_with_a_bad_header_is_the_loader_error(capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"schema": 1, "scenario": {"name": "x"}}\n', encoding="utf-8")
    rc, out, err = urc(capsys, "tui", "--follow", str(trace))
    assert rc == 2 and f"{trace}:1: line 1 must be the header" in err
