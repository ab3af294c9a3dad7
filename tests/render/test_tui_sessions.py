"""The TUI's sessions panel, driven with Pilot: one row per session at the cursor's
step, shown only for scenarios that use sessions; highlighting a session highlights
its nodes in the tree; the inspector and the tree's badges name the sessions."""

from __future__ import annotations

import pytest

from workbench.model.scenarios.scenario import scenario_from_records
from workbench.tui.app import WorkbenchApp
from workbench.tui.widgets.badges import SESSION_COVERED_STYLE, SESSION_FRONTIER_STYLE
from workbench.tui.widgets.inspector import Inspector
from workbench.tui.widgets.sessions_panel import SessionsPanel
from workbench.tui.widgets.tree_panel import TreePanel

SIZE = (160, 48)
STEPS = [{"op": "session_open", "session": "s1"},
         {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4, 5, 6], "session": "s1"},
         {"op": "release", "req": "r1"},  # s1 tags [1..6]
         {"op": "req_prefill", "req": "r2", "tokens": [1, 2, 3, 9, 9]},
         {"op": "release", "req": "r2"},  # splits s1's path: [1 2 3] covered, [4 5 6] s1's frontier
         {"op": "session_open", "session": "t", "streaming": True},
         {"op": "stream_turn", "req": "t1", "tokens": [7, 8, 9], "session": "t"},
         {"op": "session_release", "session": "s1"}]


def app(steps=STEPS, sessions: bool = True) -> WorkbenchApp:
    header = {"schema": 1, "scenario": {"name": "sessions"},
              "config": {"components": ["full"], "kv_size": 64, "session_radix_cache": sessions}}
    return WorkbenchApp([scenario_from_records(header, steps)], background=False)


def prompts(panel) -> list[str]:
    return [str(panel.get_option_at_index(i).prompt) for i in range(panel.option_count)]


async def go(pilot, step: int) -> None:
    pilot.app.cursor.go(step)
    pilot.app.refresh_view()
    await pilot.pause()


def tree_rows(tree: TreePanel) -> dict[int, object]:
    """Row id -> its label, for every row drawn."""
    out, stack = {}, list(tree.root.children)
    while stack:
        node = stack.pop()
        if node.data and node.data[0] == "node":
            out[node.data[1]] = node.label
        stack.extend(node.children)
    return out


def styles(label) -> set[str]:
    return {str(span.style) for span in label.spans}


@pytest.mark.asyncio
async def test_the_panel_lists_each_session_and_follows_the_cursor():
    workbench = app()
    async with workbench.run_test(size=SIZE) as pilot:
        panel = workbench.query_one(SessionsPanel)
        assert not panel.display  # the start: none open yet, its rows go to the chapter's text
        await go(pilot, 3)
        assert panel.display
        (row,) = prompts(panel)
        frontier = workbench.view.state.sessions.leaves["s1"]["full"]
        assert row.startswith("s1 gen 1  open")
        assert f"full § #{frontier[0]}  holds 6 in 1 node" in row
        await go(pilot, 5)
        (row,) = prompts(panel)
        assert "holds 6 in 2 nodes" in row  # r2 split s1's path: the frontier and its parent
        await go(pilot, 7)
        s1, t = prompts(panel)
        assert t.startswith("t gen 2  streaming, in flight") and "slot kv 3 (3 in tree)" in t and "lent to t1" in t
        await go(pilot, 8)
        s1, t = prompts(panel)
        assert s1.startswith("s1 gen –  closed ✝") and "§" not in s1  # the close let go of its frontier
        assert panel.border_subtitle == "1 closed, 1 open"


@pytest.mark.asyncio
async def test_highlighting_a_session_highlights_its_frontier_and_coverage_in_the_tree():
    workbench = app()
    async with workbench.run_test(size=SIZE) as pilot:
        await go(pilot, 5)
        tree, panel = workbench.query_one(TreePanel), workbench.query_one(SessionsPanel)
        (frontier,) = workbench.view.state.sessions.leaves["s1"]["full"]
        parent = workbench.view.state.record(frontier).parent
        assert not any(SESSION_FRONTIER_STYLE in styles(label) for label in tree_rows(tree).values())
        panel.focus()
        panel.highlighted = 0
        await pilot.pause()
        assert workbench.selected_session == "s1"
        rows = tree_rows(tree)
        assert SESSION_FRONTIER_STYLE in styles(rows[frontier])
        assert SESSION_COVERED_STYLE in styles(rows[parent]) and SESSION_FRONTIER_STYLE not in styles(rows[parent])
        untagged = [i for i in rows if i not in (frontier, parent)]
        assert untagged and not any(SESSION_COVERED_STYLE in styles(rows[i]) for i in untagged)
        await pilot.press("n")  # the highlight stays with the session as the cursor moves
        assert SESSION_FRONTIER_STYLE in styles(tree_rows(tree)[frontier])


@pytest.mark.asyncio
async def test_badges_and_the_inspector_name_the_sessions():
    workbench = app()
    async with workbench.run_test(size=SIZE) as pilot:
        await go(pilot, 5)
        (frontier,) = workbench.view.state.sessions.leaves["s1"]["full"]
        parent = workbench.view.state.record(frontier).parent
        rows = tree_rows(workbench.query_one(TreePanel))
        assert "full:3 §1=s1" in rows[frontier].plain and "full:3 §1 " in rows[parent].plain
        workbench.selected = frontier
        workbench.refresh_view(follow=False)
        await pilot.pause()
        text = str(workbench.query_one(Inspector).render())
        assert "session_ref 1  frontier of s1" in text


@pytest.mark.asyncio
async def test_the_panel_is_hidden_without_sessions():
    steps = [{"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3]}, {"op": "release", "req": "r1"}]
    workbench = app(steps, sessions=False)
    async with workbench.run_test(size=SIZE) as pilot:
        await go(pilot, 2)
        assert not workbench.query_one(SessionsPanel).display


@pytest.mark.asyncio
async def test_y_on_a_highlighted_session_explains_that_session():
    from workbench.tui.screens.why import WhyScreen

    workbench = app()
    async with workbench.run_test(size=SIZE) as pilot:
        await go(pilot, 8)
        panel = workbench.query_one(SessionsPanel)
        panel.focus()
        panel.highlighted = panel._sids.index("s1")
        await pilot.pause()
        await pilot.press("y")
        assert isinstance(workbench.screen, WhyScreen)
        text = "\n".join([workbench.screen.explanation.title, *map(str, workbench.screen.explanation.lines)])
        assert "s1" in text and "closed" in text


@pytest.mark.asyncio
async def test_the_sessions_list_starts_on_a_row_and_y_explains_it():
    from workbench.tui.screens.why import WhyScreen

    workbench = app()
    async with workbench.run_test(size=SIZE) as pilot:
        await go(pilot, 8)
        panel = workbench.query_one(SessionsPanel)
        assert panel.highlighted == 0
        panel.focus()
        await pilot.pause()
        assert workbench.selected_session == panel._sids[0]  # the tree shows the session the list points at
        await pilot.press("y")
        assert isinstance(workbench.screen, WhyScreen) and panel._sids[0] in workbench.screen.explanation.title
