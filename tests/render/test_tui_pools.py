"""The pools panel at the sizes a terminal has: big counts abbreviated (65,536 -> 65.5k),
every pool, counter and delta on screen at 80 and 120 columns, nothing cut."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.geometry import Region

from workbench.model.scenarios.scenario import load_scenario, scenario_from_records
from workbench.tui.app import WorkbenchApp
from workbench.tui.widgets.pools_panel import COUNTERS, SHORT_HEADERS, count_text

ROOT = Path(__file__).resolve().parents[2]
BIG = scenario_from_records({"schema": 1, "scenario": {"name": "big"},
                             "config": {"components": ["full"], "kv_size": 65536}},
                            [{"op": "insert", "key": list(range(1, 1201))}])


def panel_lines(panel) -> list[str]:
    """Every line of the panel's text as drawn at its width (scrolled through, not cut)."""
    text = panel.query_one(".panel-text")
    return [strip.text for strip in text.render_lines(Region(0, 0, text.size.width, text.virtual_size.height or 1))]


def test_counts_abbreviate_past_four_digits():
    assert [count_text(n) for n in (0, 48, 9999, 65536, 123456, 1_048_576, -1200, -12000)] == \
        ["0", "48", "9,999", "65.5k", "123k", "1.05M", "-1,200", "-12.0k"]
    assert count_text(5, signed=True) == "+5" and count_text(-65536, signed=True) == "-65.5k"


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (80, 30), (120, 40)], ids=["80x24", "80x30", "120x40"])
@pytest.mark.parametrize("scenario", ["big", "tour_hicache_hybrid.toml"])
async def test_every_pool_counter_and_delta_shows_uncut(size, scenario):
    chapter = BIG if scenario == "big" else load_scenario(ROOT / "scenarios" / scenario)
    app = WorkbenchApp([chapter], background=False)
    async with app.run_test(size=size) as pilot:
        await pilot.press("n")
        await pilot.pause()
        panel = app.query_one("#pools")
        if panel in app.collapsed_panels():  # below 30 rows: in the strip, o opens it
            while app.screen.maximized is not panel:
                await pilot.press("o")
            await pilot.pause()
        lines = panel_lines(panel)
        text = " ".join(lines)
        width = panel.query_one(".panel-text").size.width
        assert all(len(line.rstrip()) <= width for line in lines) and "…" not in text, lines
        state, before = app.cursor.state, app.cursor.timeline.state_after(0)
        for name, pool in state.pools.items():
            assert name in text
            for counter in COUNTERS:
                value, old = getattr(pool, counter), getattr(before.pools[name], counter)
                assert count_text(value) in text, (name, counter)
                if value != old:
                    assert count_text(value - old, signed=True) in text, (name, counter)
        assert all(header in text for header in SHORT_HEADERS.values())
        if scenario == "big":
            assert "65.5k" in text and "65,536" not in text
