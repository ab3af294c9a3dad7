"""The TUI's debugger keys, driven with Pilot: breakpoints (b, w) and continue /
reverse-continue (c, C), the diff view (d), why (y), live ops (:), saving the session
(ctrl+s), exporting a test (t) and following a growing trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.model.debugging.breakpoints import holds, parse_condition
from workbench.model.timeline.diff import change_rows
from workbench.model.timeline.runner import run_scenario, same_state
from workbench.model.scenarios.scenario import load_scenario, scenario_from_records
from workbench.tui.app import WorkbenchApp
from workbench.tui.screens.breakpoints import BreakpointScreen
from workbench.tui.screens.diff import DiffScreen
from workbench.tui.screens.prompt import PromptScreen
from workbench.tui.screens.why import WhyScreen
from workbench.tui.widgets.command_bar import CommandBar
from workbench.tui.widgets.tree_panel import TreePanel

ROOT = Path(__file__).resolve().parents[2]
TOUR_SWA = load_scenario(ROOT / "scenarios" / "tour_swa.toml")
TOUR_MAMBA = load_scenario(ROOT / "scenarios" / "tour_mamba.toml")
SIZE = (160, 50)
KEY_NAMES = {" ": "space", "=": "equals_sign", "<": "less_than_sign", ">": "greater_than_sign", ".": "full_stop",
             "_": "underscore", "-": "minus"}


def app_for(*scenarios, **kwargs) -> WorkbenchApp:
    return WorkbenchApp(list(scenarios or [TOUR_SWA]), background=False, **kwargs)


async def type_text(pilot, text: str) -> None:
    await pilot.press(*(KEY_NAMES.get(ch, ch) for ch in text))


def steps_where(timeline, text: str) -> list[int]:
    condition = parse_condition(text)
    return [i for i in range(1, len(timeline) + 1) if holds(timeline, condition, i)]


@pytest.mark.asyncio
async def test_breakpoint_editor_then_continue_and_reverse_continue_land_on_the_right_steps():
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        expected = steps_where(app.cursor.timeline, "event=tombstone component=swa")
        assert len(expected) >= 2
        await pilot.press("b")
        assert isinstance(app.screen, BreakpointScreen)
        await type_text(pilot, "event=bogus")
        await pilot.press("enter")
        assert app.cursor.breakpoints == []  # refused, with the reason shown
        assert "unknown event kind 'bogus'" in str(app.screen.query_one("#breakpoint-error").render())
        app.screen.query_one("#breakpoint-input").value = ""
        await type_text(pilot, "event=tombstone component=swa")
        await pilot.press("enter", "escape")
        assert [c.text for c in app.cursor.breakpoints] == ["event=tombstone component=swa"]
        for step in expected:
            await pilot.press("c")
            assert app.cursor.step == step
        await pilot.press("c")  # none after the last: the cursor stays
        assert app.cursor.step == expected[-1]
        for step in reversed(expected[:-1]):
            await pilot.press("C")
            assert app.cursor.step == step
        await pilot.press("C")
        assert app.cursor.step == expected[0]


@pytest.mark.asyncio
async def test_breakpoint_editor_removes_a_condition():
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        app.cursor.add_breakpoint("event=split")
        app.cursor.add_breakpoint("failed")
        await pilot.press("b")
        await pilot.press("tab")  # to the list
        await pilot.press("delete")
        assert [c.text for c in app.cursor.breakpoints] == ["failed"]


@pytest.mark.asyncio
async def test_watch_stops_where_the_selected_node_changes():
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        node = app.selected
        assert node is not None
        await pilot.press("w")
        assert [c.text for c in app.cursor.breakpoints] == [f"node={node}"]
        expected = steps_where(app.cursor.timeline, f"node={node}")
        await pilot.press("c")
        assert app.cursor.step == next(i for i in expected if i > 1)


@pytest.mark.asyncio
async def test_diff_view_compares_the_step_with_the_previous_then_any_two():
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        app.cursor.go(3)
        app.refresh_view()
        await pilot.press("d")
        screen = app.screen
        assert isinstance(screen, DiffScreen) and (screen.start, screen.end) == (2, 3)
        table = screen.query_one("#diff-nodes")
        diff = app.cursor.timeline.diff(2, 3)
        assert table.row_count == len(change_rows(diff))
        screen.query_one("#diff-from").value = "0"
        screen.query_one("#diff-to").value = "9"
        screen.query_one("#diff-to").focus()
        await pilot.press("enter")
        assert (screen.start, screen.end) == (0, 9)
        assert table.row_count == len(change_rows(app.cursor.timeline.diff(0, 9)))
        screen.query_one("#diff-to").value = "999"  # out of range: refused, the view stays
        screen.query_one("#diff-to").focus()
        await pilot.press("enter")
        assert (screen.start, screen.end) == (0, 9)
        await pilot.press("escape")
        assert not isinstance(app.screen, DiffScreen) and app.cursor.step == 3


def diff_cells(screen) -> list[tuple[str, ...]]:
    table = screen.query_one("#diff-nodes")
    return [tuple(str(cell) for cell in table.get_row_at(i)) for i in range(table.row_count)]


@pytest.mark.asyncio
async def test_diff_of_an_lru_only_step_shows_the_rank_moves_never_equal_cells():
    """Issue 30: the tour's step 6 (a match of a cached key) only reorders the LRU; its
    diff showed each moved node twice the same. Now a row is what changed."""
    app = app_for(load_scenario(ROOT / "scenarios" / "tour.toml"))
    async with app.run_test(size=SIZE) as pilot:
        app.cursor.go(6)
        app.refresh_view()
        await pilot.press("d")
        cells = diff_cells(app.screen)
        assert cells == [("#2", "full LRU rank", "r2", "r1"), ("#3", "full LRU rank", "r4", "r0")]
        assert "full LRU: #3, #2 moved to the MRU end" in str(app.screen.query_one("#diff-globals").render())
        for start, end in ((2, 3), (0, 9), (12, 13)):  # splits, adds, removals, locks: still never equal
            app.screen.query_one("#diff-from").value, app.screen.query_one("#diff-to").value = str(start), str(end)
            app.screen.query_one("#diff-to").focus()
            await pilot.press("enter")
            cells = diff_cells(app.screen)
            assert cells and all(before != after for _, _, before, after in cells), (start, end, cells)


@pytest.mark.asyncio
async def test_live_ops_run_at_the_end_and_a_bad_one_changes_nothing():
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        total = len(app.cursor.timeline)
        await pilot.press("colon")
        bar = app.query_one(CommandBar)
        assert bar.display and app.focused is bar
        await type_text(pilot, "insert 1..9")
        await pilot.press("enter")
        assert len(app.cursor.timeline) == total + 1 and app.cursor.step == total + 1
        record = app.cursor.record
        assert record.step.op == "insert" and record.step.fields["key"] == list(range(1, 10)) and record.passed
        await type_text(pilot, "match 1 2 3 as live_m")
        await pilot.press("enter")
        await type_text(pilot, "lock nosuch as L")  # the same error a scenario file would get
        await pilot.press("enter")
        assert len(app.cursor.timeline) == total + 2 and bar.value == "lock nosuch as L"
        bar.value = ""
        await type_text(pilot, "lock live_m as L")
        await pilot.press("enter")
        assert len(app.cursor.timeline) == total + 3 and app.cursor.record.step.op == "lock"
        await pilot.press("escape")
        assert not bar.display and app.focused is not bar
        await pilot.press("p")  # keys step again once the bar is closed
        assert app.cursor.step == total + 2


@pytest.mark.asyncio
async def test_command_bar_completes_live_names():
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("colon")
        await type_text(pilot, "ins")
        await pilot.pause()
        bar = app.query_one(CommandBar)
        assert bar._suggestion == "insert"
        await pilot.press("right")
        assert bar.value == "insert"
        bar.value = ""
        await type_text(pilot, "lock h")  # the tour's match names: head, m
        await pilot.pause()
        assert bar._suggestion == "lock head"


@pytest.mark.asyncio
async def test_a_live_session_saved_with_ctrl_s_replays_to_the_same_states(tmp_path, monkeypatch):
    copy = tmp_path / "tour_swa.toml"
    copy.write_text((ROOT / "scenarios" / "tour_swa.toml").read_text())
    app = app_for(load_scenario(copy))
    async with app.run_test(size=SIZE) as pilot:
        for command in ("insert 1..9", "match 1 2 3 4 5 as live_m", "lock live_m as L", "evict swa=2",
                        "unlock L", "evict full=3"):
            await pilot.press("colon")
            await type_text(pilot, command)
            await pilot.press("enter", "escape")
        timeline = app.cursor.timeline
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, PromptScreen)
        await pilot.press("enter")  # the suggested name, beside the scenario
        saved = tmp_path / "tour_swa-session.toml"
        assert saved.exists()
        written = saved.read_bytes()
        await pilot.press("ctrl+s")  # again: a free name is suggested; typed over the first, it is refused
        assert app.screen.default == str(tmp_path / "tour_swa-session-1.toml")
        app.screen.query_one("#prompt-input").value = str(saved)
        await pilot.press("enter")
        await pilot.pause()
        assert saved.read_bytes() == written and not (tmp_path / "tour_swa-session-1.toml").exists()
        await pilot.press("ctrl+s")  # nor over the scenario it shows
        app.screen.query_one("#prompt-input").value = str(copy)
        await pilot.press("enter")
        await pilot.pause()
        assert any("scenario being shown" in n.message for n in app._notifications)
        replayed = run_scenario(saved)
        assert len(replayed) == len(timeline) and replayed.passed
        for i in range(len(timeline) + 1):
            assert same_state(replayed.state_after(i).to_snapshot(), timeline.state_after(i).to_snapshot()), i
        assert saved.read_text(encoding="utf-8").count("[[step]]") == len(timeline)


@pytest.mark.asyncio
async def test_saving_to_an_unwritable_place_says_so_and_keeps_going(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+s")
        app.screen.query_one("#prompt-input").value = str(tmp_path / "no" / "such" / "dir" / "s.toml")
        await pilot.press("enter")
        app.screen.query_one("#prompt-input").value = "session.txt"  # refused: the dialog is still open
        await pilot.press("enter")
        assert list(tmp_path.iterdir()) == [] and isinstance(app.screen, PromptScreen)
        await pilot.press("escape", "n")
        assert app.cursor.step == 1


@pytest.mark.asyncio
async def test_why_on_a_node_and_on_the_match():
    app = app_for(TOUR_MAMBA)
    async with app.run_test(size=SIZE) as pilot:
        timeline = app.cursor.timeline
        step = next(r.index for r in timeline.records if r.step.op == "match")
        app.cursor.go(step)
        app.refresh_view()
        app.selected = None
        await pilot.press("y")
        assert isinstance(app.screen, WhyScreen)
        assert f"step {step}" in app.screen.explanation.title or step in app.screen.explanation.steps
        await pilot.press("escape")
        await pilot.press("f")  # select the step's node: on a match step y still explains the match …
        assert app.selected is not None
        await pilot.press("y")
        assert app.screen.explanation.title.startswith(f"why the match at step {step}")
        await pilot.press("escape")
        app.query_one(TreePanel).focus()  # … until the user is in the tree, pointing at a node
        await pilot.press("y")
        assert isinstance(app.screen, WhyScreen) and f"{app.selected}" in app.screen.explanation.text()
        assert not app.screen.explanation.title.startswith("why the match")


FAILING_MATCHES = scenario_from_records(
    {"schema": 1, "scenario": {"name": "failing matches"}, "config": {"components": ["full"], "kv_size": 32}},
    [{"op": "insert", "key": [1, 2, 3, 4]},
     {"op": "match", "key": [1, 2, 3, 4, 5], "as": "m", "expect": {"prefix_len": 3}},
     {"op": "req_prefill", "req": "r", "tokens": [1, 2, 3, 4, 9], "expect": {"prefix_len": 2}},
     {"op": "insert", "key": [1, 2, 3, 9]}])


@pytest.mark.asyncio
async def test_y_on_a_failing_match_explains_why_the_match_stopped_not_the_followed_node():
    """Issue 30: y on a failed match explained the node the step follows, not the match."""
    app = app_for(FAILING_MATCHES)
    async with app.run_test(size=SIZE) as pilot:
        for step in (2, 3):  # a match op; a request whose failed check is its match's prefix_len
            await pilot.press("n") if step == 3 else await pilot.press("n", "n")
            await pilot.pause()
            assert app.cursor.step == step and not app.cursor.record.passed and app.selected is not None
            await pilot.press("y")
            assert isinstance(app.screen, WhyScreen)
            answer = app.screen.explanation
            assert answer.title.startswith(f"why the match at step {step}"), answer.title
            assert any(line.startswith("Full accepts 4 tokens") for line in answer.lines)
            await pilot.press("escape")
        await pilot.press("n")  # an insert is no match: y explains the followed node
        await pilot.press("y")
        assert app.screen.explanation.title == f"node #{app.selected} after step 4"


@pytest.mark.asyncio
async def test_follow_appends_a_growing_trace_and_survives_its_deletion(tmp_path):
    from workbench.model.timeline.follow import TraceFollower
    from workbench.model.scenarios.writer import scenario_jsonl

    lines = scenario_jsonl(TOUR_SWA).splitlines(keepends=True)
    trace = tmp_path / "growing.jsonl"
    trace.write_text("".join(lines[:4]), encoding="utf-8")  # the header and 3 steps
    follower = TraceFollower(trace)
    scenario = follower.start()
    app = WorkbenchApp([scenario], background=False, follower=follower)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("greater_than_sign")
        assert app.cursor.step == 3
        with trace.open("a", encoding="utf-8") as stream:
            stream.write("".join(lines[4:9]) + lines[9][:10])  # five steps and half of a sixth
        app.poll_follower()
        assert app.cursor.available == 8 and app.cursor.step == 8  # at the end: it follows
        await pilot.press("p")
        with trace.open("a", encoding="utf-8") as stream:
            stream.write(lines[9][10:])
        app.poll_follower()
        assert app.cursor.available == 9 and app.cursor.step == 7  # stepped back: it stays
        trace.unlink()
        app.poll_follower()
        assert app.follower is None and app.cursor.available == 9
        app.poll_follower()  # no longer following: nothing happens
        whole = run_scenario(ROOT / "scenarios" / "tour_swa.toml")
        assert same_state(app.cursor.timeline.state_after(9).to_snapshot(), whole.state_after(9).to_snapshot())


@pytest.mark.asyncio
async def test_t_exports_a_regression_test_that_passes(tmp_path, monkeypatch):
    import subprocess
    import sys

    copy = tmp_path / "tour_swa.toml"
    copy.write_text((ROOT / "scenarios" / "tour_swa.toml").read_text())
    app = app_for(load_scenario(copy))
    async with app.run_test(size=SIZE) as pilot:
        app.cursor.go(8)
        app.refresh_view()
        await pilot.press("t")
        assert isinstance(app.screen, PromptScreen) and app.screen.default == str(tmp_path / "test_tour_swa_step8.py")
        await pilot.press("enter")
    exported = tmp_path / "test_tour_swa_step8.py"
    assert exported.exists()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(exported)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


@pytest.mark.asyncio
async def test_why_on_a_highlighted_event_names_its_trigger():
    from workbench.tui.widgets.events_panel import EventsPanel

    app = app_for(TOUR_MAMBA)
    async with app.run_test(size=SIZE) as pilot:
        app.cursor.go(13)
        app.refresh_view()
        events = app.query_one(EventsPanel)
        events.focus()
        cascade = next(i for i, e in enumerate(app.cursor.record.events) if e.kind.value == "cascade")
        events.highlighted = cascade
        await pilot.press("y")
        assert isinstance(app.screen, WhyScreen)
        text = app.screen.explanation.text()
        assert text.startswith("[step 13 ") and "cascade mamba node #3" in text
        assert "triggered by event" in text and "tombstone swa node #3" in text


@pytest.mark.asyncio
async def test_a_long_breakpoint_scan_runs_off_the_ui_thread_shows_progress_and_esc_calls_it_off(monkeypatch):
    import threading

    from textual.widgets import ProgressBar

    from workbench.model.debugging import cursor as cursor_module
    from workbench.model.timeline import search as search_module

    monkeypatch.setattr(cursor_module, "QUICK_STEPS", 0)  # every scan of these steps as a long one
    monkeypatch.setattr(cursor_module, "SCAN_CHUNK", 2)
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        expected = steps_where(app.cursor.timeline, "event=tombstone component=swa")
        app.cursor.add_breakpoint("event=tombstone component=swa")
        await pilot.press("c")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.cursor.step == expected[0] and not app.query_one("#scanning", ProgressBar).display

        entered, release = threading.Event(), threading.Event()
        search = search_module.search

        def held(*args, **kwargs):  # the scan's second chunk waits until the test lets it go
            if entered.is_set():
                release.wait(5)
            entered.set()
            return search(*args, **kwargs)

        monkeypatch.setattr(search_module, "search", held)  # what each chunk of the scan calls
        await pilot.press("c")
        assert entered.wait(5)
        await pilot.pause()
        assert app.query_one("#scanning", ProgressBar).display  # shown while it runs
        await pilot.press("n")  # the screen still answers keys: (c again is refused, n moves)
        assert app.cursor.step == expected[0] + 1
        await pilot.press("escape")
        release.set()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.cursor.step == expected[0] + 1  # called off: nothing moved
        assert not app.query_one("#scanning", ProgressBar).display
        assert any("scan called off" in n.message for n in app._notifications)


@pytest.mark.asyncio
async def test_l_marks_the_breakpoints_off_the_ui_thread_once_then_opens_the_charts_at_once(monkeypatch):
    from workbench.model.debugging import cursor as cursor_module
    from workbench.tui.screens.charts import ChartsScreen

    monkeypatch.setattr(cursor_module, "QUICK_STEPS", 0)
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        expected = steps_where(app.cursor.timeline, "event=tombstone component=swa")
        app.cursor.add_breakpoint("event=tombstone component=swa")
        scans = []
        monkeypatch.setattr(app, "scan_in_background", lambda *a: scans.append(a) or type(app).scan_in_background(app, *a))
        await pilot.press("l")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, ChartsScreen) and len(scans) == 1
        assert app.screen.series.breakpoint_steps.tolist() == expected
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("l")  # the same breakpoints: their markers are kept, no scan
        await pilot.pause()
        assert isinstance(app.screen, ChartsScreen) and len(scans) == 1
