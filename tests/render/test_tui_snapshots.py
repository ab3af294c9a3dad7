"""A small gallery of the TUI at a fixed size (pytest-textual-snapshot): the screens a
user meets, with nothing time- or random-dependent on them. Update on purpose only:
``pytest tests/render/test_tui_snapshots.py --snapshot-update``."""

from __future__ import annotations

from pathlib import Path

import pytest

from cache.checks.invariants import Violation
from workbench.model.scenarios.scenario import load_scenario
from workbench.tui.app import WorkbenchApp

ROOT = Path(__file__).resolve().parents[2]
SIZE = (160, 48)


def tour(name: str) -> WorkbenchApp:
    return WorkbenchApp([load_scenario(Path("scenarios") / name)], background=False)


def at_step(step: int):
    async def run_before(pilot) -> None:
        pilot.app.cursor.go(step)
        pilot.app.refresh_view()
        await pilot.pause()

    return run_before


@pytest.fixture(autouse=True)
def _from_the_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # paths on screen are relative and the same everywhere


def test_mamba_cascade_step(snap_compare):
    assert snap_compare(tour("tour_mamba.toml"), terminal_size=SIZE, run_before=at_step(13))


def test_swa_tombstone_step(snap_compare):
    assert snap_compare(tour("tour_swa.toml"), terminal_size=SIZE, run_before=at_step(3))


def test_mamba_copy_on_write_step(snap_compare):
    assert snap_compare(tour("tour_mamba.toml"), terminal_size=SIZE, run_before=at_step(6))


def test_invariant_failure_banner(snap_compare, monkeypatch):
    import workbench.model.timeline.runner as runner

    real = runner.check_invariants

    def broken(cache, touched=None, data_touched=None):
        found = real(cache, touched, data_touched)
        return found + [Violation("counter.evictable", "evictable 10 != 9 summed over nodes")] if len(cache.tree.nodes) > 2 else found

    monkeypatch.setattr(runner, "check_invariants", broken)
    assert snap_compare(tour("tour.toml"), terminal_size=SIZE, run_before=at_step(2))


def test_command_palette(snap_compare):
    async def run_before(pilot) -> None:
        from textual.widgets import Input

        await pilot.press("ctrl+p")
        await pilot.pause()
        pilot.app.screen.query_one(Input).cursor_blink = False  # a blinking cursor is a clock on screen
        await pilot.press(*"step")
        for _ in range(5):  # the palette searches in a worker: let it settle
            await pilot.pause()
            await pilot.wait_for_scheduled_animations()

    assert snap_compare(tour("tour.toml"), terminal_size=SIZE, run_before=run_before)


def test_help_screen(snap_compare):
    assert snap_compare(tour("tour.toml"), terminal_size=SIZE, press=["f1"])


def test_diff_view(snap_compare):
    """``d`` at the SWA tour's eviction of every unlocked window: tombstones and pools."""
    async def run_before(pilot) -> None:
        await at_step(10)(pilot)
        await pilot.press("d")

    assert snap_compare(tour("tour_swa.toml"), terminal_size=SIZE, run_before=run_before)


def test_why_answer(snap_compare):
    """``y`` on node #3 after the Mamba tour's cascade: tombstone, cascade and locks, in sentences."""
    async def run_before(pilot) -> None:
        await at_step(13)(pilot)
        # choose #3 the way a user does, through the tree: its messages then queue behind the
        # highlight the step's redraw posted for #1 (setting app.selected directly raced it)
        from workbench.tui.widgets.tree_panel import TreePanel

        tree = pilot.app.query_one(TreePanel)
        rows, stack = [], [tree.root]
        while stack:
            node = stack.pop()
            rows.append(node)
            stack.extend(node.children)
        tree.select_node(next(n for n in rows if n.data and n.data[0] == "node" and n.data[1] == 3))
        await pilot.pause()
        assert pilot.app.selected == 3
        await pilot.press("y")

    assert snap_compare(tour("tour_mamba.toml"), terminal_size=SIZE, run_before=run_before)


def test_host_only_node_step(snap_compare):
    """The hybrid host-tier chapter's demotion: host-only data reversed (full:HOST 4 …),
    the bottom row grown to every host pool, the inspector saying host-only."""
    async def run_before(pilot) -> None:
        await at_step(5)(pilot)
        pilot.app.selected = 1
        pilot.app.refresh_view(follow=False)
        await pilot.pause()

    assert snap_compare(tour("tour_hicache_hybrid.toml"), terminal_size=SIZE, run_before=run_before)


def test_request_panel_mid_flight(snap_compare):
    """The first tour's chunk step: request r1 mid-flight under the tree, its prefix grown
    to 11 and its lock moved to the new leaf (the step's changes in yellow), highlighted."""
    async def run_before(pilot) -> None:
        from workbench.tui.widgets.requests_panel import RequestsPanel

        await at_step(12)(pilot)
        panel = pilot.app.query_one(RequestsPanel)
        panel.focus()
        panel.highlighted = 0
        await pilot.pause()

    assert snap_compare(tour("tour.toml"), terminal_size=SIZE, run_before=run_before)


def test_sessions_panel_with_a_session_highlighted(snap_compare):
    """The sessions tour after s1's current incarnation tagged [17]: the sessions panel
    under the requests, s1 highlighted and its frontier and coverage highlighted in the
    tree, the §n badges on every node a session holds."""
    async def run_before(pilot) -> None:
        from workbench.tui.widgets.sessions_panel import SessionsPanel

        await at_step(19)(pilot)
        panel = pilot.app.query_one(SessionsPanel)
        panel.focus()
        panel.highlighted = 0
        await pilot.pause()

    assert snap_compare(tour("tour_sessions.toml"), terminal_size=SIZE, run_before=run_before)


def test_sessions_panel_streaming_turn(snap_compare):
    """The sessions tour's second streaming turn: t's slot lends its record to t2."""
    assert snap_compare(tour("tour_sessions.toml"), terminal_size=SIZE, run_before=at_step(24))


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)], ids=["80x24", "120x40", "200x60"])
def test_the_hybrid_host_tour_at_three_sizes(snap_compare, size):
    """Issue 30: from 80x24 up every panel keeps a place (what does not fit scrolls)."""
    assert snap_compare(tour("tour_hicache_hybrid.toml"), terminal_size=size, run_before=at_step(6))


def test_a_zoomed_panel(snap_compare):
    async def zoom(pilot) -> None:
        await at_step(6)(pilot)
        pilot.app.query_one("#step").focus()
        await pilot.press("z")
        await pilot.pause()

    assert snap_compare(tour("tour_hicache_hybrid.toml"), terminal_size=(80, 24), run_before=zoom)
