"""The tree panel brings the rows it has drawn to a new step instead of rebuilding them
(issue 30): rows still there keep their tree nodes, only rows whose content changed are
relabelled, and whatever the path taken to a step, the panel shows what a panel drawn
afresh at that step shows."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from workbench.model.scenarios.scenario import load_scenario, scenario_from_records
from workbench.tui.app import WorkbenchApp
from workbench.tui.widgets.tree_panel import PAGE, TreePanel

ROOT = Path(__file__).resolve().parents[2]
TOURS = ["tour.toml", "tour_swa.toml", "tour_mamba.toml", "tour_hicache_hybrid.toml", "tour_sessions.toml"]


def drawn(tree: TreePanel) -> list[tuple]:
    """Every drawn row, depth first: its depth, what it is, its label and whether it is open."""
    out = []

    def walk(node, depth: int) -> None:
        out.append((depth, node.data, str(node.label), node.is_expanded, node.allow_expand))
        for child in node.children:
            walk(child, depth + 1)
    walk(tree.root, 0)
    return out


def drawn_afresh(tree: TreePanel, view) -> list[tuple]:
    """What a panel that had drawn nothing yet would draw (the user's opened rows kept)."""
    tree.clear()
    tree.drawn.clear()
    tree.show(view)
    return drawn(tree)


@pytest.mark.asyncio
@pytest.mark.parametrize("name", TOURS)
async def test_whatever_the_path_to_a_step_the_tree_is_drawn_as_afresh(name):
    path = ROOT / "scenarios" / name
    if not path.exists():
        pytest.skip(f"{name} is not bundled")
    app = WorkbenchApp([load_scenario(path)], background=False)
    async with app.run_test(size=(120, 40)) as pilot:
        tree, n = app.query_one(TreePanel), app.cursor.available
        rng = random.Random(name)
        moves = ["n"] * 6 + ["p"] * 3 + [f"go {rng.randrange(0, n + 1)}" for _ in range(6)] + ["greater_than_sign"]
        for move in moves:
            if move.startswith("go "):
                app.cursor.go(int(move[3:]))
                app.refresh_view()
            else:
                await pilot.press(move)
            await pilot.pause()
            by_update = drawn(tree)
            assert by_update == drawn_afresh(tree, app.view), f"{name} after {move} (step {app.cursor.step})"


def wide_tree(leaves: int, checks: int = 2) -> WorkbenchApp:
    steps = [{"op": "insert", "key": [i, i + 1]} for i in range(1, 2 * leaves, 2)]
    steps += [{"op": "check"}] * checks
    header = {"schema": 1, "scenario": {"name": "wide"}, "config": {"components": ["full"], "kv_size": 4 * leaves + 8}}
    return WorkbenchApp([scenario_from_records(header, steps)], background=False)


@pytest.mark.asyncio
async def test_a_step_that_changes_nothing_relabels_nothing_and_keeps_every_tree_node():
    app = wide_tree(40)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("greater_than_sign")  # the last check: the one before it cleared the marks
        await pilot.press("p")
        await pilot.pause()
        tree = app.query_one(TreePanel)
        before = {node.data: node for node in tree.root.children}
        await pilot.press("n")
        await pilot.pause()
        assert tree.relabelled == 0
        assert {node.data: node for node in tree.root.children} == before  # the same tree nodes
        await pilot.press("less_than_sign")  # back to the empty cache: every row goes
        await pilot.pause()
        assert [c.data for c in tree.root.children] == [] and tree.relabelled == 0


@pytest.mark.asyncio
async def test_a_changed_row_is_relabelled_and_painted_with_its_new_label():
    app = wide_tree(3, checks=0)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("n", "n")
        await pilot.pause()
        tree = app.query_one(TreePanel)
        first = tree.root.children[0]
        old_label = str(first.label)
        await pilot.press("n")  # a third insert: the first leaf's LRU rank moves
        await pilot.pause()
        assert tree.root.children[0] is first and str(first.label) != old_label
        painted = "".join(s.text for s in tree.render_line(first.line - int(tree.scroll_y)))
        assert str(first.label)[:20] in painted


@pytest.mark.asyncio
async def test_the_pages_of_children_a_user_asked_for_stay_shown_on_the_next_step():
    app = wide_tree(PAGE + 30)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("greater_than_sign")
        await pilot.pause()
        tree = app.query_one(TreePanel)
        more = tree.root.children[-1]
        assert more.data[0] == "more" and str(more.label).startswith("… 30 more")
        tree.focus()
        tree.move_cursor(more)
        await pilot.press("enter")
        await pilot.pause()
        assert len([c for c in tree.root.children if c.data[0] == "node"]) == PAGE + 30
        await pilot.press("p")
        await pilot.pause()
        assert len([c for c in tree.root.children if c.data[0] == "node"]) == PAGE + 30
        assert all(c.data[0] != "more" for c in tree.root.children)
