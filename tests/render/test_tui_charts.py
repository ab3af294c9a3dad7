"""``l``, the timeline charts, as a cache engineer reads them: every series' name whole,
a step axis under the lines, and ←/→ one step at a time even on a stored run whose
steps far outnumber the chart's columns."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.model.scenarios.scenario import load_scenario
from workbench.model.scenarios.workload import write_trace
from workbench.model.timeline.store_run import run_to_store
from workbench.model.timeline.stored import open_store
from workbench.tui.app import WorkbenchApp
from workbench.tui.screens.charts import ChartsScreen

ROOT = Path(__file__).resolve().parents[2]


def drawn(screen: ChartsScreen) -> list[str]:
    return str(screen.query_one("#charts-text").content).splitlines()


async def open_charts(app: WorkbenchApp, pilot) -> ChartsScreen:
    await pilot.press("l")
    await pilot.pause()
    assert isinstance(app.screen, ChartsScreen)
    return app.screen


@pytest.mark.asyncio
@pytest.mark.parametrize("width", [80, 120])
async def test_every_series_name_shows_whole(width):
    app = WorkbenchApp([load_scenario(ROOT / "scenarios" / "tour_hicache_hybrid.toml")], background=False)
    async with app.run_test(size=(width, 30)) as pilot:
        screen = await open_charts(app, pilot)
        for _ in screen.charts:
            group, names = screen.charts[screen.chart]
            lines = drawn(screen)
            for i, name in enumerate(names):
                label = screen.series.info[name].label
                assert lines[1 + i].startswith(label + " "), (group, lines[1 + i])
            await pilot.press("tab")
        assert any(screen.series.info[n].label == "mamba tombstones" for _, ns in screen.charts for n in ns)


@pytest.mark.asyncio
async def test_a_step_axis_runs_under_the_charts_from_0_to_the_last_step():
    app = WorkbenchApp([load_scenario(ROOT / "scenarios" / "tour.toml")], background=False)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = await open_charts(app, pilot)
        names = screen.charts[0][1]
        axis = drawn(screen)[1 + len(names) + 1]  # under the lines and the marks
        assert axis.lstrip().startswith("step")
        numbers = axis[screen.label_width:]
        assert numbers.startswith("0") and numbers.rstrip().endswith(f"{screen.series.steps:,}")
        assert len(numbers.rstrip()) == len(screen._points(names[0]).steps)  # the last step at the last column


@pytest.mark.asyncio
async def test_arrows_move_one_step_on_a_stored_run_longer_than_the_chart(tmp_path):
    trace = tmp_path / "t.jsonl"
    with open(trace, "w") as stream:
        write_trace(stream, 150, seed=3)
    store = tmp_path / "t.urcdb"
    run_to_store(str(trace), str(store)).close()
    app = WorkbenchApp([open_store(str(store))], background=False)
    async with app.run_test(size=(120, 30)) as pilot:
        app.cursor.go(300)
        app.refresh_view()
        screen = await open_charts(app, pilot)
        assert screen.series.steps > 4 * screen.width  # many steps to a column
        axis = drawn(screen)[1 + len(screen.charts[0][1]) + 1]
        assert axis.rstrip().endswith(f" {screen.series.steps:,}")  # the last column holds the last step
        await pilot.press("left")
        assert screen.step == 299
        await pilot.press("right", "right")
        assert screen.step == 301
        assert f"cursor at step 301" in "\n".join(drawn(screen))
        await pilot.press("shift+right")  # a column's worth
        assert screen.step - 301 >= screen.series.steps // screen.width
        await pilot.press("end")
        assert screen.step == screen.series.steps
        await pilot.press("enter")
        await pilot.pause()
        assert app.cursor.step == screen.series.steps
