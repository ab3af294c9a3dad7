"""The first minute with the tour: the steps list has the focus (arrows and z act at
once), n at a chapter's end says what follows, the step panel's title keeps the step
and the chapter at 80 columns, and exports of the bundled scenarios land in the current
directory, never in the package's scenarios/."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.model.scenarios.scenario import load_scenario
from workbench.tui.app import WorkbenchApp
from workbench.tui.screens.prompt import PromptScreen
from workbench.tui.widgets.step_list import StepList
from workbench.tui.widgets.step_panel import StepPanel

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ("tour.toml", "tour_swa.toml", "tour_mamba.toml")


def tour(*names: str) -> WorkbenchApp:
    return WorkbenchApp([load_scenario(ROOT / "scenarios" / n) for n in names or CHAPTERS], background=False)


@pytest.mark.asyncio
async def test_the_steps_list_has_the_focus_at_the_start():
    app = tour()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert isinstance(app.focused, StepList)
        await pilot.press("down", "enter")
        await pilot.pause()
        assert app.cursor.step == 1
        await pilot.press("z")
        assert app.screen.maximized is app.query_one(StepList)


@pytest.mark.asyncio
async def test_n_at_a_chapter_s_last_step_says_what_follows_and_bracket_moves_on():
    app = tour()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press(">", "n")
        await pilot.pause()
        last = app.cursor.available
        assert app.cursor.step == last and app.cursor.chapter_index == 0
        said = [n.message for n in app._notifications][-1]
        assert said.startswith(f"step {last} is the last of chapter 1 (tour)") and "2 chapters follow" in said
        assert "] opens chapter 2" in said
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert app.cursor.chapter_index == 1


@pytest.mark.asyncio
async def test_n_at_the_last_chapter_s_end_says_the_tour_is_over():
    app = tour("tour.toml")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press(">", "n")
        await pilot.pause()
        assert [n.message for n in app._notifications][-1].startswith(f"step {app.cursor.available} is the last")
        assert "no chapter follows" in [n.message for n in app._notifications][-1]


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (100, 30)])
async def test_the_step_title_keeps_the_step_and_the_chapter(size):
    app = tour()
    async with app.run_test(size=size) as pilot:
        await pilot.press("n", "n")
        await pilot.pause()
        panel = app.query_one(StepPanel)
        row = app.screen._compositor.render_strips()[panel.region.y].text[panel.region.x:panel.region.right]
        assert "step 2/" in row and "1/3" in row, row


@pytest.mark.asyncio
async def test_an_export_of_a_bundled_scenario_goes_to_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = tour("tour.toml")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("n", "e")
        assert isinstance(app.screen, PromptScreen) and app.screen.default == "tour-step1.svg"
        await pilot.press("escape", "t")
        assert isinstance(app.screen, PromptScreen) and app.screen.default == "test_tour_step1.py"


@pytest.mark.asyncio
async def test_the_empty_palette_lists_the_workbench_s_commands():
    from textual.command import CommandPalette
    from textual.widgets import OptionList

    app = tour("tour.toml")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+p")
        for _ in range(5):  # the palette searches in a worker: let it settle
            await pilot.pause()
            await pilot.wait_for_scheduled_animations()
        assert isinstance(app.screen, CommandPalette)
        options = app.screen.query_one(OptionList)
        listed = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert any("step: next" in line for line in listed), listed
        assert any("view: why" in line for line in listed), listed


@pytest.mark.asyncio
async def test_the_focused_panel_has_a_heavy_border_the_others_a_round_one():
    app = tour("tour.toml")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        steps, tree = app.query_one(StepList), app.query_one("#tree")
        assert steps.styles.border_top[0] == "heavy" and tree.styles.border_top[0] == "round"
        tree.focus()
        await pilot.pause()
        assert tree.styles.border_top[0] == "heavy" and steps.styles.border_top[0] == "round"
