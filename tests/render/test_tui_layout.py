"""The layout rule (workbench/tui/fitting.py) at every size a cache engineer uses, on
every tour chapter's every step, with a live op typed and on a stored run: the tree
keeps its rows (5 below 40 rows, 12 from there), the step's node is among the rows
shown, and from 120x40 the step's whole text (description, result or error) shows
without scrolling or zooming."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.model.scenarios.bundled import TOUR
from workbench.model.scenarios.scenario import load_scenario
from workbench.model.scenarios.workload import write_trace
from workbench.model.timeline.store_run import run_to_store
from workbench.model.timeline.stored import open_store
from workbench.tui.app import WorkbenchApp
from workbench.tui.widgets.step_panel import StepPanel
from workbench.tui.widgets.tree_panel import TreePanel

ROOT = Path(__file__).resolve().parents[2]
SIZES = [(80, 24), (100, 30), (120, 40), (160, 50), (200, 60)]
IDS = [f"{w}x{h}" for w, h in SIZES]


def tree_rows(app: WorkbenchApp) -> int:
    return app.query_one(TreePanel).scrollable_content_region.height


def node_shown(app: WorkbenchApp) -> bool:
    """The selected node's row (the step's node, followed) lies in the tree's visible lines."""
    tree, view = app.query_one(TreePanel), app.view
    if view.selected is None:
        return True
    target = tree._row_nodes.get(tree.rows.row_of(view.selected))
    top = int(tree.scroll_offset.y)
    return target is not None and top <= target.line < top + tree_rows(app)


def step_text_whole(app: WorkbenchApp) -> bool:
    step = app.query_one(StepPanel)
    return step.virtual_size.height <= step.scrollable_content_region.height


def check(app: WorkbenchApp, size: tuple[int, int], where) -> None:
    floor = 12 if size[1] >= 40 else 5
    assert tree_rows(app) >= floor, (where, tree_rows(app))
    assert node_shown(app), where
    if size >= (120, 40):
        assert step_text_whole(app), where


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_every_tour_step_keeps_the_tree_the_node_and_the_step_text(size):
    app = WorkbenchApp([load_scenario(f"scenarios/{name}.toml") for name in TOUR], background=False)
    async with app.run_test(size=size) as pilot:
        for chapter in range(len(TOUR)):
            while True:
                await pilot.pause()
                await pilot.pause()  # the fitting's heights settle in the refresh after the step's
                check(app, size, (TOUR[chapter], app.cursor.step))
                if app.cursor.step >= app.cursor.available:
                    break
                await pilot.press("n")
            await pilot.press("right_square_bracket")


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_with_the_live_op_bar_open_the_rule_holds(size):
    app = WorkbenchApp([load_scenario(ROOT / "scenarios" / "tour_hicache_hybrid.toml")], background=False)
    async with app.run_test(size=size) as pilot:
        await pilot.press("greater_than_sign", "colon")
        await pilot.press(*"insert 1 2 3 4 9 9", "enter")
        await pilot.pause()
        await pilot.pause()
        assert app.query_one("#command").display  # the bar stays open for the next op
        assert app.cursor.chapter.scenario.steps[-1].op == "insert" and app.cursor.step == app.cursor.available
        check(app, size, "live insert")
        await pilot.press("escape")
        await pilot.pause()
        check(app, size, "bar closed")


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("stored")
    trace = folder / "t.jsonl"
    with open(trace, "w") as stream:
        write_trace(stream, 60, seed=3, components=("full", "swa", "mamba"))
    store = folder / "t.urcdb"
    run_to_store(str(trace), str(store)).close()
    return store


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_a_stored_run_keeps_the_tree_and_the_node(size, stored_run):
    app = WorkbenchApp([open_store(str(stored_run))], background=False)
    async with app.run_test(size=size) as pilot:
        for step in (1, app.cursor.available // 2, app.cursor.available):
            app.cursor.go(step)
            app.refresh_view()
            await pilot.pause()
            await pilot.pause()
            assert tree_rows(app) >= (12 if size[1] >= 40 else 5), (step, tree_rows(app))
            assert node_shown(app), step
