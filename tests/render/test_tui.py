"""The workbench TUI, driven as a user would with Textual's Pilot: every key, panel
message and screen, asserting on the model (the cursor) and on what the widgets show."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from urc_util import urc
from workbench.model.scenarios.scenario import load_scenario, scenario_from_records
from workbench.tui.app import WorkbenchApp
from workbench.tui.bindings import COMMANDS
from workbench.tui.screens.goto import GotoScreen
from workbench.model.scenarios.live import OP_HELP
from workbench.tui.screens.help import HelpScreen
from workbench.tui.widgets.banner import Banner
from workbench.tui.widgets.events_panel import EventsPanel
from workbench.tui.widgets.inspector import Inspector
from workbench.tui.widgets.step_list import StepList
from workbench.tui.widgets.step_panel import StepPanel
from workbench.tui.widgets.tree_panel import TreePanel

ROOT = Path(__file__).resolve().parents[2]
TOURS = [load_scenario(ROOT / "scenarios" / name) for name in ("tour.toml", "tour_swa.toml", "tour_mamba.toml")]
SIZE = (160, 50)


def app_for(*scenarios, **kwargs) -> WorkbenchApp:
    return WorkbenchApp(list(scenarios or TOURS[:1]), background=False, **kwargs)


def shown(widget) -> str:
    """The plain text a Static widget was last given."""
    console = Console(width=300, file=io.StringIO(), record=True)
    console.print(widget.content)
    return console.export_text()


def tree_labels(app: WorkbenchApp) -> list[str]:
    out = []

    def walk(node):
        for child in node.children:
            out.append(str(child.label))
            walk(child)

    walk(app.query_one(TreePanel).root)
    return out


@pytest.mark.asyncio
async def test_stepping_keys_move_the_cursor_and_redraw_every_panel():
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        assert app.cursor.step == 0 and tree_labels(app) == []
        await pilot.press("n")
        assert app.cursor.step == 1 and any(label.startswith("#1 [1 2 3 4 5 6 7 8]") for label in tree_labels(app))
        assert "step 1 (" in shown(app.query_one(StepPanel)) and "insert(key=[1 2 3 4 5 6 7 8])" in shown(
            app.query_one(StepPanel))
        await pilot.press("n", "n", "p")
        assert app.cursor.step == 2
        await pilot.press("greater_than_sign")
        assert app.cursor.step == len(TOURS[0].steps)
        await pilot.press("less_than_sign")
        assert app.cursor.step == 0
        await pilot.press("p")  # nothing before the start
        assert app.cursor.step == 0


@pytest.mark.asyncio
async def test_goto_jumps_and_keys_type_into_its_input():
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("g")
        assert isinstance(app.screen, GotoScreen)
        await pilot.press("n", "1", "2")  # "n" types (and is refused by the integer input); it does not step
        assert app.cursor.step == 0
        await pilot.press("enter")
        await pilot.pause()
        assert app.cursor.step == 12 and not isinstance(app.screen, GotoScreen)
        assert app.query_one(StepList).highlighted == 12


@pytest.mark.asyncio
async def test_the_tree_follows_the_step_and_the_inspector_shows_the_node():
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n", "n", "n")  # the match that splits [5 6 7 8]
        await pilot.pause()
        focus = app.cursor.focus_node()
        assert app.selected == focus
        assert f"node #{focus}" in shown(app.query_one(Inspector))
        assert "this step: added, split" in shown(app.query_one(Inspector))
        head, tail = app.cursor.state.record(focus).components[0].value_ends
        assert head and f"slots [{' '.join(map(str, head))}" in shown(app.query_one(Inspector))
        tree = app.query_one(TreePanel)
        assert tree.cursor_node is not None and tree.cursor_node.data[1] == focus


@pytest.mark.asyncio
async def test_choosing_an_event_selects_its_node():
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n", "n")
        events = app.query_one(EventsPanel)
        events.focus()
        index, node = next((i, e.node) for i, e in enumerate(app.cursor.record.events) if e.node is not None)
        events.highlighted = index
        await pilot.press("enter")
        await pilot.pause()
        assert app.selected == node and f"node #{node}" in shown(app.query_one(Inspector))


@pytest.mark.asyncio
async def test_events_filter_by_component():
    app = app_for(TOURS[1])  # SWA: steps have both full and swa events
    async with app.run_test(size=SIZE) as pilot:
        mixed = next(r.index for r in app.cursor.timeline.records
                     if {e.component for e in r.events} >= {"swa", "full"})
        app.cursor.go(mixed)
        app.refresh_view()
        await pilot.pause()
        events = app.query_one(EventsPanel)
        everything = events.option_count
        await pilot.press("x", "x")  # all -> full -> swa
        assert events.only == "swa" and 0 < events.option_count < everything
        assert all(e.component == "swa" for e in events._events)
        await pilot.press("x")
        assert events.only is None and events.option_count == everything


@pytest.mark.asyncio
async def test_choosing_a_step_in_the_list_jumps_there():
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        steps = app.query_one(StepList)
        steps.focus()
        steps.highlighted = 7
        await pilot.press("enter")
        await pilot.pause()
        assert app.cursor.step == 7


@pytest.mark.asyncio
async def test_a_failed_step_shows_a_banner_naming_what_failed():
    bad = scenario_from_records({"schema": 1, "scenario": {"name": "bad"}, "config": {"components": ["full"], "kv_size": 8}},
                                [{"op": "insert", "key": [1, 2], "expect": {"nodes": 5}}, {"op": "check"}])
    app = app_for(bad)
    async with app.run_test(size=SIZE) as pilot:
        banner = app.query_one(Banner)
        assert not banner.display
        await pilot.press("n")
        assert banner.display and "✗ nodes: expected 5, got 1" in shown(banner)
        await pilot.press("n")
        assert not banner.display


@pytest.mark.asyncio
async def test_evicted_nodes_stay_one_step_as_ghosts():
    scenario = scenario_from_records({"schema": 1, "scenario": {"name": "g"}, "config": {"components": ["full"], "kv_size": 8}},
                                     [{"op": "insert", "key": [1, 2]}, {"op": "evict", "full": 2}])
    app = app_for(scenario)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n", "n")
        ghosts = [c for c in app.query_one(TreePanel).root.children if c.data[0] == "ghost"]
        assert [g.data[1] for g in ghosts] == [1]


@pytest.mark.asyncio
async def test_the_node_panel_and_the_tree_count_a_key_s_tokens_once():
    """Issue 30: a long key read ``(11 tokens)  (11 tokens)`` in the node panel and
    ``(11 tokens) 11t`` in the tree, and a one-token key ``(1 tokens)``."""
    scenario = scenario_from_records({"schema": 1, "scenario": {"name": "k"}, "config": {"components": ["full"], "kv_size": 32}},
                                     [{"op": "insert", "key": list(range(1, 12))},
                                      {"op": "insert", "key": list(range(1, 13))}])
    app = app_for(scenario)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await pilot.pause()
        node = shown(app.query_one(Inspector))
        assert "key  [1 2 3 … 10 11]  (11 tokens)\n" in node and node.count("(11 tokens)") == 2  # key and path
        assert tree_labels(app)[0].startswith("#1 [1 2 3 … 10 11] 11t ") and "tokens)" not in tree_labels(app)[0]
        await pilot.press("n")
        await pilot.pause()
        assert app.selected == 2
        node = shown(app.query_one(Inspector))
        assert "key  [12]  (1 token)\n" in node and "path [1 2 3 … 11 12]  (12 tokens)\n" in node
        assert "tokens)  (" not in node and "(1 tokens)" not in node


@pytest.mark.asyncio
async def test_help_lists_every_binding_and_the_legend():
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        text = " ".join(shown(w) for w in app.screen.query("Static"))
        assert all(c.id in text for c in COMMANDS) and "tombstone" in text and "lock_ref" in text
        assert all(usage in text for usage in OP_HELP.values())  # the live ops, from the op registry
        await pilot.press("escape")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)


@pytest.mark.asyncio
async def test_the_palette_runs_commands_from_the_binding_table():
    from textual.command import CommandList, CommandPalette

    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await pilot.press(*"step: last")
        for _ in range(100):  # the palette searches asynchronously
            await pilot.pause(0.05)
            if isinstance(app.screen, CommandPalette) and app.screen.query_one(CommandList).option_count:
                break
        await pilot.press("enter")
        for _ in range(100):
            await pilot.pause(0.05)
            if app.cursor.step:
                break
        assert app.cursor.step == len(TOURS[0].steps)


@pytest.mark.asyncio
async def test_a_keymap_rebinds_by_id(tmp_path):
    app = app_for(keymap={"step.next": "j"})
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("j")
        assert app.cursor.step == 1


@pytest.mark.asyncio
async def test_chapters_switch_with_brackets():
    app = WorkbenchApp(TOURS, background=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("right_square_bracket")
        assert app.cursor.chapter_index == 1 and app.cursor.step == 0
        assert "step 0/" in str(app.query_one(StepPanel).border_title) and "tour-swa" in str(app.query_one(StepPanel).border_title)
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert app.cursor.chapter_index == 0


@pytest.mark.asyncio
async def test_export_asks_where_defaults_beside_the_scenario_and_never_overwrites(tmp_path, monkeypatch):
    import graphviz

    from workbench.tui.screens.prompt import PromptScreen

    folder, elsewhere = tmp_path / "scenarios", tmp_path / "cwd"
    folder.mkdir(), elsewhere.mkdir()
    (folder / "tour.toml").write_text((ROOT / "scenarios" / "tour.toml").read_text())
    monkeypatch.chdir(elsewhere)  # exports never land in the current directory by default
    app = app_for(load_scenario(folder / "tour.toml"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n", "e")
        assert isinstance(app.screen, PromptScreen) and app.screen.default == str(folder / "tour-step1.svg")
        await pilot.press("enter")
        await pilot.pause()
        assert (folder / "tour-step1.svg").read_text().startswith("<?xml")
        await pilot.press("e")  # the next default is a free name
        assert app.screen.default == str(folder / "tour-step1-1.svg")
        app.screen.query_one("Input").value = str(folder / "tour-step1.svg")  # typed over a file: refused
        await pilot.press("enter")
        await pilot.pause()
        refused = [n.message for n in app._notifications if n.title == "not saved"]
        assert refused and "file exists; pick another name" in refused[-1] and "--force" not in refused[-1]
        assert list(elsewhere.iterdir()) == [] and sorted(p.name for p in folder.iterdir()) == ["tour-step1.svg",
                                                                                              "tour.toml"]

        def missing(*args, **kwargs):
            raise graphviz.ExecutableNotFound(("dot",))

        monkeypatch.setattr(graphviz.Digraph, "pipe", missing)
        await pilot.press("e", "enter")
        await pilot.pause()
        assert any(n.message.startswith("not exported: failed to execute") for n in app._notifications)


@pytest.mark.asyncio
async def test_a_trace_loads_in_the_background_and_the_list_grows():
    steps = [{"op": "insert", "key": [i, i + 1]} for i in range(1, 400)]
    trace = scenario_from_records({"schema": 1, "scenario": {"name": "big"}, "config": {"components": ["full"],
                                                                                      "kv_size": 2048}}, steps)
    app = WorkbenchApp([trace], background=True)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(200):
            await pilot.pause(0.05)
            if app.cursor.chapter.loaded:
                break
        await pilot.pause(0.1)
        assert app.cursor.chapter.loaded and app.query_one(StepList).option_count == len(steps) + 1
        await pilot.press("greater_than_sign")
        assert app.cursor.step == len(steps)


@pytest.mark.asyncio
async def test_a_chapter_shows_its_text_while_its_cache_is_built(monkeypatch):
    """The cache (and torch) is built off the UI thread: the first frame already reads
    the chapter's name and description; stepping waits for the cache, quitting does not."""
    import threading

    from workbench.model.debugging.cursor import TimelineCursor

    release = threading.Event()
    prepare = TimelineCursor.prepare

    def slow_prepare(self, chapter):
        release.wait(10)
        prepare(self, chapter)

    monkeypatch.setattr(TimelineCursor, "prepare", slow_prepare)
    app = WorkbenchApp(TOURS[:1], background=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = " ".join(shown(app.query_one(StepPanel)).split())
        assert not app.cursor.chapter.ready
        assert TOURS[0].name in text and " ".join(TOURS[0].description.split())[:60] in text
        assert "building the cache" in text
        await pilot.press("n")  # no step to go to yet: nothing happens, nothing breaks
        assert app.cursor.step == 0 and not app.cursor.chapter.ready
        await pilot.press("question_mark")  # the keys can be read meanwhile
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        release.set()
        for _ in range(200):
            await pilot.pause(0.02)
            if app.cursor.chapter.loaded:
                break
        assert app.query_one(StepList).option_count == len(TOURS[0].steps) + 1
        assert "building the cache" not in shown(app.query_one(StepPanel))
        await pilot.press("n")
        assert app.cursor.step == 1


@pytest.mark.asyncio
async def test_a_chapter_whose_cache_cannot_be_built_says_why_and_the_workbench_stays(monkeypatch):
    """The cache is built off the UI thread now: a [config] no cache can be built from
    is said on the chapter (and kept for ``urc tui`` to exit 2 with), never a traceback."""
    from workbench.model.scenarios.errors import ScenarioError
    from workbench.model.timeline import runner

    def refuse(scenario, device=None):
        raise ScenarioError("config cannot be built: not enough memory for the pools", scenario.path, 3)

    monkeypatch.setattr(runner, "build_cache", refuse)
    app = WorkbenchApp(TOURS[:2], background=True)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(200):
            await pilot.pause(0.02)
            if app.input_error is not None:
                break
        await pilot.pause()
        assert "not enough memory for the pools" in str(app.input_error)
        text = " ".join(shown(app.query_one(StepPanel)).split())
        assert TOURS[0].name in text and "error: " in text and "not enough memory" in text
        await pilot.press("n")  # nothing to step through: nothing happens
        assert app.cursor.step == 0 and not app.cursor.chapter.ready
        await pilot.press("q")
    assert app.return_code in (None, 0)


def test_a_bad_file_exits_2_before_the_tui_starts(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('schema = 1\n[scenario]\nname = "x"\n[config]\ncomponents = ["full"]\nkv_size = 8\n[[step]]\nop = "nope"\n')
    rc, out, err = urc(capsys, "tui", str(bad))
    assert rc == 2 and "bad.toml:8: unknown op 'nope'" in err


def test_without_a_terminal_urc_tui_prints_the_walk_through(capsys):
    rc, out, err = urc(capsys, "tui", str(ROOT / "scenarios" / "smoke.toml"))
    assert rc == 0 and "-- step 1" in out and "run `urc tui` in a terminal" in out


@pytest.mark.asyncio
async def test_the_lru_panel_lists_fulls_leaves_in_the_policys_order_and_the_tree_shows_what_it_reads():
    from workbench.tui.widgets.lru_panel import LRUPanel

    policies = load_scenario(ROOT / "scenarios" / "policies.toml")
    app = app_for(policies)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(7):
            await pilot.press("n")
        state = app.cursor.state
        first = state.node(state.evictable_leaves[0])
        assert first.path == (20, 21, 22, 23)  # C, priority 0
        assert f"full evicts (priority) first: #{first.id} priority 0 · " in shown(app.query_one(LRUPanel))
        assert any(label.startswith(f"#{first.id} [20 21 22 23]") and "prio 0" in label for label in tree_labels(app))


@pytest.mark.asyncio
async def test_the_metrics_panel_shows_the_running_totals_and_what_the_step_added():
    from workbench.tui.widgets.metrics_panel import MetricsPanel

    tour = load_scenario(ROOT / "scenarios" / "tour_hicache.toml")
    app = app_for(tour)
    async with app.run_test(size=SIZE) as pilot:
        panel = app.query_one(MetricsPanel)
        assert "nothing counted yet" in shown(panel)
        step = next(r.index for r in app.cursor.timeline.records if r.state.metrics["full_evicted_total"])
        await pilot.press(*["n"] * step)
        metrics, before = app.cursor.timeline.records[step - 1].state.metrics, app.cursor.timeline.state_after(step - 1).metrics
        added = metrics["full_evicted_total"] - before["full_evicted_total"]
        assert added > 0 and f"evicted {metrics['full_evicted_total']:,} +{added}" in shown(panel).replace("\n", " ")


@pytest.mark.asyncio
async def test_the_pools_panel_shows_the_storage_tier_and_a_prefetch_with_its_trailing_pools():
    from workbench.tui.widgets.pools_panel import PoolsPanel

    app = app_for(load_scenario(ROOT / "scenarios" / "storage_hybrid.toml"))
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(3):
            await pilot.press("n")
        text = shown(app.query_one(PoolsPanel))
        assert "storage memory  pages 4 (+5 swa/mamba)  storing 0" in text
        for _ in range(3):
            await pilot.press("n")
        assert "prefetching p1 at #0 (16t, querying, with swa and mamba)" in shown(app.query_one(PoolsPanel))
