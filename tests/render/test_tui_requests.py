"""The TUI's request panel, driven with Pilot: the running requests at the cursor's
step, what the step did to them, ended ones dimmed, and ``y`` on a request."""

from __future__ import annotations

import pytest

from workbench.model.debugging.why import why_event
from workbench.model.scenarios.scenario import scenario_from_records
from workbench.tui.app import WorkbenchApp
from workbench.tui.screens.why import WhyScreen
from workbench.tui.widgets.requests_panel import RequestsPanel

SIZE = (160, 48)
STEPS = [{"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4, 5, 6]},
         {"op": "req_decode", "req": "r1", "tokens": [7, 8, 9, 10]},
         {"op": "checkpoint", "req": "r1"},
         {"op": "req_prefill", "req": "r2", "tokens": [1, 2, 3, 4, 5, 6, 7, 8, 50]},
         {"op": "release", "req": "r1"}]


def app() -> WorkbenchApp:
    header = {"schema": 1, "scenario": {"name": "requests"},
              "config": {"components": ["full"], "page_size": 4, "kv_size": 128}}
    return WorkbenchApp([scenario_from_records(header, STEPS)], background=False)


def prompts(panel: RequestsPanel) -> list[str]:
    return [str(panel.get_option_at_index(i).prompt) for i in range(panel.option_count)]


async def go(pilot, step: int) -> None:
    pilot.app.cursor.go(step)
    pilot.app.refresh_view()
    await pilot.pause()


@pytest.mark.asyncio
async def test_the_panel_follows_the_cursor_and_shows_what_each_step_did():
    workbench = app()
    async with workbench.run_test(size=SIZE) as pilot:
        panel = workbench.query_one(RequestsPanel)
        assert prompts(panel) == ["no running requests"] and panel.border_subtitle == "0 running"
        await go(pilot, 3)
        (shown,) = prompts(panel)
        node = workbench.cursor.state.requests[0].lock_node
        assert shown.startswith(f"r1 prefix 8 / committed 10  inserted 8  lock #{node} receipt 2  prio 0")
        assert "row [" in shown and f"▲ prefix grew 0 → 8 (+8); inserted 0 → 8; lock moved from #0 to #{node}" in shown
        assert panel.border_subtitle == "1 running, 1 changed by this step"
        await go(pilot, 4)
        first, second = prompts(panel)
        assert "▲" not in first and second.startswith("r2 prefix 8 / committed 9")
        await go(pilot, 5)
        running, ended = prompts(panel)
        assert running.startswith("r2 ") and ended.startswith("r1 ended: it held 2 own slots past a prefix of 8")
        await pilot.press("p")  # back a step: r1 is running again, r2 just admitted
        assert [p.split()[0] for p in prompts(panel)] == ["r1", "r2"]


@pytest.mark.asyncio
async def test_y_on_a_highlighted_request_explains_it_and_the_highlight_survives_a_step():
    workbench = app()
    async with workbench.run_test(size=SIZE) as pilot:
        await go(pilot, 4)
        panel = workbench.query_one(RequestsPanel)
        panel.focus()
        panel.highlighted = 1
        await pilot.press("y")
        assert isinstance(workbench.screen, WhyScreen)
        assert workbench.screen.explanation.title == "request r2 after step 4"
        await pilot.press("escape")
        await pilot.press("n")
        assert panel.highlighted_request == "r2"  # the same request, though r1 ended and is listed after it
        await pilot.press("y")
        assert workbench.screen.explanation.title == "request r2 after step 5"


@pytest.mark.asyncio
async def test_y_elsewhere_still_explains_the_match():
    workbench = app()
    async with workbench.run_test(size=SIZE) as pilot:
        await go(pilot, 4)
        workbench.selected = None
        await pilot.press("y")
        assert workbench.screen.explanation.title.startswith("why the match at step 4")


@pytest.mark.asyncio
async def test_the_lists_start_with_a_row_highlighted_and_y_answers_about_it():
    """Focusing a list and pressing y explains its first row at once."""
    from workbench.tui.widgets.events_panel import EventsPanel

    workbench = app()
    async with workbench.run_test(size=SIZE) as pilot:
        await go(pilot, 4)
        panel = workbench.query_one(RequestsPanel)
        assert panel.highlighted == 0 and panel.highlighted_request == "r1"
        panel.focus()
        await pilot.press("y")
        assert workbench.screen.explanation.title == "request r1 after step 4"
        await pilot.press("escape")
        events = workbench.query_one(EventsPanel)
        assert events.highlighted == 0 and events.highlighted_event == 0
        events.focus()
        await pilot.press("y")
        assert workbench.screen.explanation.title == why_event(workbench.cursor.timeline, 4, 0).title
        assert workbench.screen.note == ""


@pytest.mark.asyncio
async def test_y_on_an_empty_list_says_what_it_answers_about_instead():
    header = {"schema": 1, "scenario": {"name": "no requests"},
              "config": {"components": ["full"], "page_size": 1, "kv_size": 64}}
    steps = [{"op": "insert", "key": [1, 2, 3]}, {"op": "match", "key": [1, 2, 9]}]
    workbench = WorkbenchApp([scenario_from_records(header, steps)], background=False)
    async with workbench.run_test(size=SIZE) as pilot:
        await go(pilot, 2)
        panel = workbench.query_one(RequestsPanel)
        panel.focus()
        await pilot.press("y")
        assert isinstance(workbench.screen, WhyScreen)
        assert workbench.screen.note.startswith("no request to explain at step 2")
        assert workbench.screen.explanation.title.startswith("why the match at step 2")


@pytest.mark.asyncio
async def test_steps_are_numbered_as_steps_and_a_lock_receipt_is_never_an_lru_rank():
    """Step 4's events say [step 4 …], not the cache's op count; the request's lock
    receipt reads ``receipt N`` (``rN`` is an LRU rank in the tree)."""
    from workbench.tui.widgets.events_panel import EventsPanel

    workbench = app()
    async with workbench.run_test(size=SIZE) as pilot:
        await go(pilot, 4)
        events = workbench.query_one(EventsPanel)
        shown = [str(events.get_option_at_index(i).prompt) for i in range(events.option_count)]
        assert shown and all(line.startswith("[step 4 new_request r2] ") for line in shown), shown
        (first, second) = prompts(workbench.query_one(RequestsPanel))
        node = workbench.cursor.state.requests[0].lock_node
        assert f"lock #{node} receipt " in first and " r2 " not in first.split("prio")[0]
        events.focus()
        await pilot.press("y")
        assert workbench.screen.explanation.title.startswith("[step 4 ")
