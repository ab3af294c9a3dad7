"""The footer at every width: the keys that fit, taken by priority from the one binding
table, nothing cut mid-word, and ``? more`` whenever a key was left out; ``?`` lists
every key."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.model.scenarios.scenario import load_scenario
from workbench.tui.app import WorkbenchApp
from workbench.tui.bindings import COMMANDS, footer_items
from workbench.tui.screens.help import HelpScreen
from workbench.tui.widgets.key_footer import KeyFooter

ROOT = Path(__file__).resolve().parents[2]
IN_FOOTER = [c for c in COMMANDS if c.priority and c.footer]


def shown_line(app: WorkbenchApp) -> str:
    return str(app.query_one(KeyFooter).render())


def app_with(keymap=None) -> WorkbenchApp:
    return WorkbenchApp([load_scenario(ROOT / "scenarios" / "tour.toml")], background=False, keymap=keymap)


def entries(line: str) -> list[str]:
    return [part for part in line.split("  ") if part]


@pytest.mark.asyncio
@pytest.mark.parametrize("width", [80, 120, 200])
async def test_the_footer_shows_the_keys_that_fit_by_priority_then_more(width):
    app = app_with()
    async with app.run_test(size=(width, 30)) as pilot:
        await pilot.pause()
        footer = app.query_one(KeyFooter)
        line = shown_line(app)
        assert footer.region.width == width and len(line) <= width  # nothing past the edge
        shown = entries(line)
        labels = {entry.text for entry in footer_items(COMMANDS, 1000)}  # every entry, whole
        assert all(entry in labels for entry in shown[:-1]), shown  # whole entries, none cut
        present = [c for c in IN_FOOTER if any(e.text in shown and c.id in e.ids for e in footer_items(COMMANDS, 1000))]
        missing = [c for c in IN_FOOTER if c not in present]
        if missing:  # every key shown outranks (or ties) every key left out, and ? says there is more
            assert max(c.priority for c in present) <= min(c.priority for c in missing)
            assert shown[-1] == "? more"
        else:
            assert shown[-1] == "? help"
        assert {"n next", "p prev", "q quit", ": live op"} <= set(shown)


@pytest.mark.asyncio
async def test_at_200_columns_every_footer_key_shows_and_at_80_some_wait_behind_more():
    app = app_with()
    async with app.run_test(size=(200, 30)) as pilot:
        await pilot.pause()
        line = shown_line(app)
        for key in ("b", "t", "e", "w", "x", "f", "[ ]", "ctrl+s"):
            assert f"{key} " in line, key
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        narrow = shown_line(app)
        assert narrow.endswith("? more") and "ctrl+s" not in narrow and len(narrow) <= 80


@pytest.mark.asyncio
async def test_question_mark_names_first_the_keys_the_footer_left_out():
    app = app_with()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        note = next(str(s.render()) for s in app.screen.query("Static")
                    if str(s.render()).startswith("not in the footer"))
        for key in ("b breaks", "t test", "e svg", "w watch", "x filter", "f follow", "ctrl+s save", "tab next panel"):
            assert key in note, key
        assert "n next" not in note and "q quit" not in note  # those are in the footer
        await pilot.press("escape")
        await pilot.resize_terminal(160, 40)
        await pilot.press("question_mark")
        await pilot.pause()
        note = next(str(s.render()) for s in app.screen.query("Static")
                    if str(s.render()).startswith("not in the footer"))
        assert "chapter" not in note and "x filter" in note  # [ ] shows as one entry at 160


@pytest.mark.asyncio
async def test_a_click_on_either_key_of_the_chapter_entry_runs_that_key():
    app = WorkbenchApp([load_scenario(ROOT / "scenarios" / name) for name in ("tour.toml", "tour_swa.toml")],
                       background=False)
    async with app.run_test(size=(200, 30)) as pilot:
        await pilot.pause()
        spans = app.query_one(KeyFooter).spans
        forward = next(start for start, _, action in spans if action == "chapter(1)")
        back = next(start for start, _, action in spans if action == "chapter(-1)")
        await pilot.click(KeyFooter, offset=(forward, 0))
        await pilot.pause()
        assert app.cursor.chapter_index == 1
        await pilot.click(KeyFooter, offset=(back, 0))
        await pilot.pause()
        assert app.cursor.chapter_index == 0


@pytest.mark.asyncio
async def test_the_footer_follows_a_keymap_and_a_click_runs_the_key():
    app = app_with({"step.next": "j"})
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        line = shown_line(app)
        assert "j next" in line and "n next" not in line
        start, _, _ = next(span for span in app.query_one(KeyFooter).spans if span[2] == "next")
        await pilot.click(KeyFooter, offset=(start, 0))
        await pilot.pause()
        assert app.cursor.step == 1


def test_footer_entries_fit_every_width_exactly():
    for width in range(20, 260):
        items = footer_items(COMMANDS, width)
        assert len("  ".join(entry.text for entry in items)) <= width
