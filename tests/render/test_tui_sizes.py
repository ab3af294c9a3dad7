"""The workbench at any terminal size (issue 30): from 80x24 up every panel keeps room,
what does not fit scrolls, ``z`` zooms the focused panel and back, a chapter with more
pools shows them all, and a redraw keeps the tree open as far as it fits."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.model.scenarios.scenario import load_scenario
from workbench.tui.app import WorkbenchApp
from workbench.tui.widgets.lru_panel import LRUPanel
from workbench.tui.widgets.panel_strip import PanelStrip
from workbench.tui.widgets.pools_panel import PoolsPanel
from workbench.tui.widgets.step_panel import StepPanel
from workbench.tui.widgets.tree_panel import TreePanel

ROOT = Path(__file__).resolve().parents[2]
SIZES = [(80, 24), (120, 40), (200, 60)]


def app_for(*names: str) -> WorkbenchApp:
    return WorkbenchApp([load_scenario(ROOT / "scenarios" / name) for name in names], background=False)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_every_panel_keeps_room_at_every_size(size):
    app = app_for("tour_hicache_hybrid.toml")
    async with app.run_test(size=size) as pilot:
        await pilot.press("n", "n", "n")
        await pilot.pause()
        collapsed = app.collapsed_panels()  # the layout rule's: in the strip, o opens each
        shown = [p for p in app.panels if p.display and p not in collapsed]
        assert all(p.region.width >= 18 and p.region.height >= 3 for p in shown), \
            {p.id: (p.region.width, p.region.height) for p in shown}
        tree = app.query_one(TreePanel)
        assert tree.region.width >= min(34, size[0] // 2)
        strip = app.query_one(PanelStrip)
        assert strip.display == bool(collapsed) and [panel for *_, panel in strip.spans] == collapsed
        for panel in collapsed:
            await pilot.press("o")
            assert app.screen.maximized is panel and panel.region.width == size[0] and app.focused is panel
        await pilot.press("o")
        assert app.screen.maximized is None


@pytest.mark.asyncio
async def test_a_long_result_scrolls_in_the_step_panel_instead_of_being_cut():
    """At 80x24 the tree keeps its rows, so a step whose text is longer than what is
    left scrolls in the step panel."""
    app = app_for("tour_sessions.toml")
    async with app.run_test(size=(80, 24)) as pilot:
        panel = app.query_one(StepPanel)
        while panel.virtual_size.height <= panel.scrollable_content_region.height:
            assert app.cursor.step < app.cursor.available, "no step longer than the panel"
            await pilot.press("n")
            await pilot.pause()
        panel.scroll_end(animate=False)
        await pilot.pause()
        assert panel.scroll_y > 0


@pytest.mark.asyncio
async def test_z_zooms_the_focused_panel_and_back():
    app = app_for("tour.toml")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("n", "n")
        app.query_one(PoolsPanel).focus()
        await pilot.press("z")
        await pilot.pause()
        assert app.screen.maximized is app.query_one(PoolsPanel)
        await pilot.press("z")
        await pilot.pause()
        assert app.screen.maximized is None


@pytest.mark.asyncio
async def test_a_chapter_with_more_pools_lays_them_all_out():
    """Going from a Full-only chapter to the hybrid host tier: the pools and LRU panels
    grow to every component's rows (they were laid out once and cut before)."""
    app = app_for("tour.toml", "tour_hicache_hybrid.toml")
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.press("n", "n")
        await pilot.press("right_square_bracket")
        await pilot.press("n", "n", "n")
        await pilot.pause()
        pools = app.query_one(PoolsPanel)
        assert pools.virtual_size.height >= len(app.view.state.pools) + 1  # a row per pool and the header
        assert pools.virtual_size.height <= pools.region.height  # and all of them show
        lru = app.query_one(LRUPanel)
        assert lru.virtual_size.height >= 2


@pytest.mark.asyncio
async def test_a_step_that_names_no_node_keeps_the_tree_open():
    app = app_for("tour_swa.toml")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("greater_than_sign")
        await pilot.pause()
        tree = app.query_one(TreePanel)
        opened = [n for n in _walk(tree.root) if n.is_expanded]
        assert len(opened) >= 2  # the root and the rows below it, not one folded row
        assert tree.last_line >= 3


def _walk(node):
    yield node
    for child in node.children:
        yield from _walk(child)


@pytest.mark.asyncio
async def test_the_timeline_charts_mark_a_leak_and_jump_to_where_it_starts():
    """``l``: a repro whose run leaks a Full slot at step 2 — the failure is marked under
    the charts, ``c`` on full ``unaccounted`` finds step 2 and enter goes there."""
    from workbench.tui.screens.charts import ChartsScreen

    app = WorkbenchApp([load_scenario(ROOT / "scenarios" / "fuzz" / "abort-chunked-not-released.toml")],
                       background=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ChartsScreen)
        drawn = str(screen.query_one("#charts-text").content)
        assert "▼" in drawn and "unaccounted" in drawn
        for _ in range(5):  # total, available, evictable, protected, held, then unaccounted
            await pilot.press("down")
        await pilot.press("c")
        await pilot.pause()
        assert screen.step == 2 and "changes at step 2" in str(screen.query_one("#charts-text").content)
        await pilot.press("enter")
        await pilot.pause()
        assert app.cursor.step == 2


@pytest.mark.asyncio
async def test_a_click_on_a_chart_line_puts_the_cursor_at_that_point():
    from workbench.tui.screens.charts import ChartsScreen

    app = WorkbenchApp([load_scenario(ROOT / "scenarios" / "tour.toml")], background=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ChartsScreen) and screen.step == 0
        names = screen.charts[screen.chart][1]
        steps = screen._points(names[1]).steps
        column = len(steps) // 2
        await pilot.click("#charts-text", offset=(screen.label_width + column, 2))  # the chart's second line
        await pilot.pause()
        assert screen.chosen == 1 and screen.step == int(steps[column]) > 0
        await pilot.click("#charts-text", offset=(2, 2))  # the label: nothing moves
        await pilot.pause()
        assert screen.step == int(steps[column])
        await pilot.press("enter")
        await pilot.pause()
        assert app.cursor.step == int(steps[column])


@pytest.mark.asyncio
async def test_a_newcomer_at_80x24_steps_through_every_tour_chapter():
    """Every chapter of the tour, every step, at 80x24: each shown panel keeps a place,
    and whatever the step panel cannot show it can scroll to."""
    from workbench.model.scenarios.bundled import TOUR

    app = app_for(*TOUR)
    async with app.run_test(size=(80, 24)) as pilot:
        for chapter in range(len(TOUR)):
            while app.cursor.step < app.cursor.available:
                await pilot.press("n")
                shown = [p for p in app.panels if p.display and p not in app.collapsed_panels()]
                assert all(p.region.width > 0 and p.region.height > 0 for p in shown), (chapter, app.cursor.step)
                step = app.query_one(StepPanel)
                assert step.virtual_size.height <= step.region.height or step.max_scroll_y > 0
            await pilot.press("right_square_bracket")
        assert app.cursor.chapter_index == len(TOUR) - 1
