"""One model of what a tree view shows (``workbench/model/timeline/shown_tree.py``): the TUI's tree
panel and the SVG picture fold, place and mark the same rows for the same step, and a
panel is one module plus one line in the app's layout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual.widgets import Static

from workbench.model.timeline.runner import Runner
from workbench.model.scenarios.scenario import load_scenario, scenario_from_records
from workbench.model.timeline.shown_tree import CHANGE_ORDER, ShownTree
from workbench.render.dot import CHANGE_FILL
from workbench.render.picture import picture
from workbench.tui.app import LAYOUT, Slot, WorkbenchApp
from workbench.tui.widgets.badges import CHANGE_STYLE
from workbench.tui.widgets.panel import Panel
from workbench.tui.widgets.tree_panel import TreePanel

ROOT = Path(__file__).resolve().parents[2]
SIZE = (160, 50)


def records(config: dict, steps: list[dict]):
    return scenario_from_records({"schema": 1, "scenario": {"name": "t"}, "config": config}, steps)


# A chain P [1..4] -> C [5..8] where only P has a host copy (write-through-selective backs
# a node up on its second hit), then an unrelated insert: both unchanged at step 4.
HOST_CHAIN_STEPS = [{"op": "insert", "key": [1, 2, 3, 4]}, {"op": "insert", "key": [1, 2, 3, 4]},
                    {"op": "insert", "key": [1, 2, 3, 4, 5, 6, 7, 8]}, {"op": "insert", "key": [50, 51]}]
HOST_CHAIN = records({"components": ["full"], "kv_size": 64,
                      "hicache": {"write_policy": "write_through_selective", "host_kv_size": 65}}, HOST_CHAIN_STEPS)
# X [1 2] -> P [3 4] -> {C [5 6], G [7 8]}; evicting the older leaf G leaves X -> P -> C
# unchanged, with G's ghost under P.
GHOST_MID_CHAIN = records({"components": ["full"], "kv_size": 64},
                          [{"op": "insert", "key": [1, 2, 3, 4, 7, 8]}, {"op": "insert", "key": [1, 2]},
                           {"op": "insert", "key": [1, 2, 3, 4, 5, 6]}, {"op": "evict", "full": 2}])
# P [1..4] -> C [5..8], both evicted at once: C's ghost under P's.
GHOST_OF_GHOST = records({"components": ["full"], "kv_size": 64},
                         [{"op": "insert", "key": [1, 2, 3, 4]}, {"op": "insert", "key": [1, 2, 3, 4, 5, 6, 7, 8]},
                          {"op": "evict", "full": 8}])
CASES = {
    "host-chain": (HOST_CHAIN, 4),
    "host-tour-demotion": (load_scenario(ROOT / "scenarios" / "tour_hicache_hybrid.toml"), 5),
    "mamba-cascade": (load_scenario(ROOT / "scenarios" / "tour_mamba.toml"), 13),
    "ghost-mid-chain": (GHOST_MID_CHAIN, 4),
    "ghost-of-ghost": (GHOST_OF_GHOST, 3),
    "tour-step-8": (load_scenario(ROOT / "scenarios" / "tour.toml"), 8),
}
FILL_KIND = {fill: kind for kind, fill in CHANGE_FILL.items()}


def picture_rows(timeline, step: int) -> dict[int, tuple]:
    """id -> (parent id, nodes folded in, ghost, mark) of every row the picture draws."""
    dot = picture(timeline, step, step - 1, max_nodes=10_000).source
    parents = {int(c): int(p) for p, c in re.findall(r"^\tn(\d+) -> n(\d+)", dot, re.M)}
    rows = {}
    for name, table, classes in re.findall(r'^\tn(\d+) \[label=<(<TABLE.*?</TABLE>)> class="([^"]*)"', dot, re.M):
        folded = re.search(r"<B>#\d+(?: \+(\d+))?</B>", table)
        fill = re.search(r'BGCOLOR="([^"]+)"', table).group(1)
        rows[int(name)] = (parents[int(name)], int(folded.group(1) or 0), "ghost" in classes.split(),
                           FILL_KIND.get(fill))
    return rows


async def panel_rows(scenario, step: int) -> dict[int, tuple]:
    """The same, read off the TUI's tree panel with every row expanded."""
    app = WorkbenchApp([scenario], background=False)
    async with app.run_test(size=SIZE) as pilot:
        app.cursor.go(step)
        app.refresh_view()
        await pilot.pause()
        tree = app.query_one(TreePanel)
        while True:
            shut = [n for n in _nodes(tree.root) if n.allow_expand and not n.is_expanded]
            if not shut:
                break
            for node in shut:
                node.expand()
            await pilot.pause()
        rows = {}
        for node in _nodes(tree.root):
            kind, row_id, _ = node.data
            label = node.label
            folded = re.match(r"#\d+ (?:\+(\d+) )?", label.plain).group(1)
            whole = {str(s.style) for s in label.spans if s.start == 0 and s.end == len(label.plain)}
            mark = next((k for k, style in CHANGE_STYLE.items() if style in whole), None)
            rows[row_id] = (node.parent.data[1], int(folded or 0), kind == "ghost", mark)
        return rows


def _nodes(branch):
    for child in branch.children:
        yield child
        yield from _nodes(child)


@pytest.mark.asyncio
@pytest.mark.parametrize("case", list(CASES))
async def test_the_panel_and_the_picture_fold_place_and_mark_the_same_rows(case):
    scenario, step = CASES[case]
    timeline = Runner(scenario).run()
    drawn = picture_rows(timeline, step)
    assert drawn and drawn == await panel_rows(scenario, step)


def test_a_host_copy_ends_a_chain_and_a_ghost_keeps_its_place():
    """The rule's host and ghost clauses, on the model itself."""
    timeline = Runner(HOST_CHAIN).run()
    tree = ShownTree(timeline.state_after(4), timeline.diff(3, 4))
    assert [r.members for r in tree.walk()][1:3] == [(1,), (2,)]  # P (+host) and C (no copy) stay apart
    plain = Runner(  # the same chain without a host tier folds
        records({"components": ["full"], "kv_size": 64}, HOST_CHAIN_STEPS)).run()
    assert ShownTree(plain.state_after(4), plain.diff(3, 4)).row(1).members == (1, 2)

    timeline = Runner(GHOST_MID_CHAIN).run()
    tree = ShownTree(timeline.state_after(4), timeline.diff(3, 4))
    (gone,) = timeline.diff(3, 4).removed
    parent = timeline.diff(3, 4).records_before[gone].parent
    assert tree.ghosts(tree.row_of(parent)) == (gone,) and tree.row(tree.row_of(parent)).bottom == parent
    assert tree.path(gone)[:2] == [gone, parent] and tree.path(gone)[-1] == tree.root_id

    timeline = Runner(GHOST_OF_GHOST).run()
    tree = ShownTree(timeline.state_after(3), timeline.diff(2, 3))
    top, below = sorted(timeline.diff(2, 3).removed, key=lambda n: len(timeline.state_after(2).path(n)))
    assert tree.ghosts(tree.root_id) == (top,) and tree.ghosts(top) == (below,)



def test_every_change_kind_has_a_style_in_the_panel_and_a_fill_in_the_picture():
    assert tuple(CHANGE_STYLE) == CHANGE_ORDER and set(CHANGE_FILL) == set(CHANGE_ORDER)


# ---- panels: one view, one method, one line ---------------------------------------------------


class ProbePanel(Panel, Static):
    """A panel a test adds: it records every view it is shown."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.views = []

    def show(self, view) -> None:
        self.views.append(view)
        self.update(f"probe: step {view.step}, {len(view.state.records)} nodes, selected #{view.selected}")


@pytest.mark.asyncio
async def test_a_panel_is_one_module_and_one_line_in_the_layout():
    layout = (*LAYOUT, Slot("side", ProbePanel, "probe", "probe"))  # the one line
    app = WorkbenchApp([load_scenario(ROOT / "scenarios" / "tour.toml")], background=False, layout=layout)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n", "n", "n")
        probe = app.query_one("#probe", ProbePanel)
        assert probe.border_title == "probe" and probe.region.height > 0  # on screen, titled
        assert [v.step for v in probe.views] == [0, 1, 2, 3]
        view = probe.views[-1]
        assert view.state is app.cursor.state and view.selected == app.cursor.focus_node()
        assert view.diff.kinds(view.selected) and view.tree.row(view.selected).mark == "added"
        assert "probe: step 3" in str(probe.render())
    assert all(callable(getattr(slot.panel, "show", None)) for slot in LAYOUT)


def test_a_layout_names_known_areas_only():
    with pytest.raises(ValueError, match="unknown layout area 'left'"):
        WorkbenchApp([load_scenario(ROOT / "scenarios" / "tour.toml")], layout=(Slot("left", ProbePanel, "p"),))


@pytest.mark.asyncio
async def test_a_node_inside_a_folded_chain_lands_on_its_row_and_the_inspector_names_the_row():
    steps = [{"op": "insert", "key": [1, 2, 3, 4, 5, 6][:k]} for k in range(1, 7)] + [{"op": "insert", "key": [50]}]
    app = WorkbenchApp([records({"components": ["full"], "kv_size": 64}, steps)], background=False)
    async with app.run_test(size=SIZE) as pilot:
        app.cursor.go(7)
        app.selected = 3  # a middle member of the chain #1 +5
        app.refresh_view(follow=False)
        await pilot.pause()
        tree = app.query_one(TreePanel)
        assert tree.cursor_node is not None and tree.cursor_node.data[1] == 1
        assert str(tree.cursor_node.label).startswith("#1 +5 [1 2 3 4 5 6] 6t")
        from workbench.tui.widgets.inspector import Inspector
        text = str(app.query_one(Inspector).render())
        assert "in the tree's row #1 +5: #1 #2 #3 #4 #5 #6" in text


def test_a_folded_row_s_rank_and_leaf_flag_say_which_member_they_belong_to():
    """A chain #1..#6 inserted prefix by prefix: each member is one LRU rank more recent
    than the one above it. The row shows the ranks it folds (``r6–1``) and whose leaf flag
    it is (``leaf #6``), never the top's rank and the bottom's flag as if both were #1's."""
    from workbench.tui.widgets.badges import row_label

    steps = [{"op": "insert", "key": [1, 2, 3, 4, 5, 6][:k]} for k in range(1, 7)] + [{"op": "insert", "key": [50]}]
    timeline = Runner(records({"components": ["full"], "kv_size": 64}, steps)).run()
    state = timeline.state_after(7)
    tree = ShownTree(state, timeline.diff(6, 7))
    row = tree.row(1)
    ranks = [state.rank("full", state.record(n)) for n in row.members]
    assert row.members == (1, 2, 3, 4, 5, 6) and ranks == [6, 5, 4, 3, 2, 1]
    label = row_label(row).plain
    assert "full:6 r6–1" in label and label.endswith("leaf #6"), label


def test_a_chain_whose_ranks_do_not_run_in_order_is_not_folded():
    """Touching the middle of a chain (a match on [1 2 3]) makes its ranks jump: the
    chain breaks where a folded rank range would misstate a member's rank, and every
    member lands on the row that shows it."""
    steps = [{"op": "insert", "key": [1, 2, 3, 4, 5, 6][:k]} for k in range(1, 7)] + [
        {"op": "match", "key": [1, 2, 3]}, {"op": "insert", "key": [50]}]
    timeline = Runner(records({"components": ["full"], "kv_size": 64}, steps)).run()
    state = timeline.state_after(8)
    tree = ShownTree(state, timeline.diff(7, 8))
    for row in tree.walk():
        if row.id == tree.root_id or len(row.members) < 2:
            continue
        ranks = [state.rank("full", state.record(n)) for n in row.members]
        way = ranks[1] - ranks[0]
        assert abs(way) == 1 and ranks == list(range(ranks[0], ranks[0] + way * len(ranks), way)), (row.members, ranks)
        assert all(tree.row_of(n) == row.id for n in row.members)
