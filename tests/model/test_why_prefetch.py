"""``urc why --prefetch RID``: a prefetch's stages and admission polls, in order, each
with its step, and the stop policy that decided how it ended."""

from __future__ import annotations

from pathlib import Path

from urc_util import urc
from workbench.model.debugging.why_prefetch import why_prefetch
from workbench.model.timeline.runner import run_scenario

TOUR = str(Path(__file__).resolve().parents[2] / "scenarios" / "tour_storage.toml")


def test_a_best_effort_cut_and_a_flushed_prefetch_read_as_their_steps():
    timeline = run_scenario(TOUR)
    cut = why_prefetch(timeline, 13, "p1")
    assert cut.steps == (7, 8)
    assert "issued" in cut.lines[0] and "16 tokens after the root" in cut.lines[0]
    assert "before the hit query took host slots" in cut.lines[1] and "with 0 tokens" in cut.lines[1]
    assert cut.lines[-1].startswith("stop policy best_effort")
    done = why_prefetch(timeline, 13, "p2")
    assert done.steps == (9, 10, 11) and "storage holds 16 of 16 tokens" in done.lines[1]
    assert "16 read, 16 tokens on the host" in done.lines[1]
    assert why_prefetch(timeline, 9, "p2").steps == (9,)  # the state after step 9: only issued


def test_the_cli_explains_a_prefetch_and_refuses_an_unknown_one(capsys):
    rc, out, _ = urc(capsys, "why", TOUR, "--prefetch", "p2")
    assert rc == 0 and out.startswith("prefetch p2 up to step 13")
    rc, _, err = urc(capsys, "why", TOUR, "--prefetch", "zz")
    assert rc == 2 and "no prefetch 'zz'" in err
    rc, _, err = urc(capsys, "why", TOUR, "--prefetch", "p2", "--node", "1")
    assert rc == 2 and "one of a node, a request, a session or a prefetch" in err
