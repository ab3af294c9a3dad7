"""``urc tui``: the workbench. The app owns a ``TimelineCursor`` (the model), renders
it through one widget per panel and turns keys into cursor commands; it never
touches a runner or the cache. Long traces load in a worker thread, and the UI is
usable from the first checked step."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from textual import on, work
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Header, Input, ProgressBar

from ..model.cursor import TimelineCursor
from ..model.scenario import Scenario
from .bindings import COMMANDS as COMMAND_TABLE
from .bindings import Command, bindings, commands
from .commands import WorkbenchCommands
from .messages import NodeChosen, StepChosen
from .screens.goto import GotoScreen
from .screens.help import HelpScreen
from .widgets.banner import Banner
from .widgets.events_panel import EventsPanel
from .widgets.inspector import Inspector
from .widgets.lru_panel import LRUPanel
from .widgets.pools_panel import PoolsPanel
from .widgets.step_list import StepList
from .widgets.step_panel import StepPanel
from .widgets.tree_panel import TreePanel


class WorkbenchApp(App[None]):
    CSS_PATH = "workbench.tcss"
    TITLE = "urc workbench"
    COMMANDS = App.COMMANDS | {WorkbenchCommands}
    BINDINGS = bindings(COMMAND_TABLE)

    def __init__(self, scenarios: list[Scenario], keymap: Optional[dict[str, str]] = None,
                 background: bool = True) -> None:
        super().__init__()
        self.cursor = TimelineCursor(scenarios)
        self.command_table: tuple[Command, ...] = commands(keymap)
        if keymap:
            self.set_keymap(keymap)  # Textual rebinds by binding id
        self.background = background
        self._shown_steps = 0
        self.selected: Optional[int] = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Banner(id="banner")
        with Horizontal(id="main"):
            yield StepList(id="steps")
            with Vertical(id="middle"):
                yield StepPanel(id="step")
                yield TreePanel(id="tree")
            with Vertical(id="side"):
                yield Inspector(id="inspector")
                yield EventsPanel(id="events")
        with Horizontal(id="bottom"):
            yield PoolsPanel(id="pools")
            yield LRUPanel(id="lru")
        yield ProgressBar(id="loading", show_eta=False)
        yield Footer()

    def on_mount(self) -> None:
        for widget_id, title in (("steps", "steps"), ("tree", "tree"), ("inspector", "node"), ("events", "events"),
                                 ("pools", "pools"), ("lru", "LRU"), ("step", "step")):
            self.query_one(f"#{widget_id}").border_title = title
        self.query_one(StepList).reset()
        self.query_one("#loading", ProgressBar).display = False
        self.open_chapter(0)

    # ---- loading -------------------------------------------------------------------------------
    def open_chapter(self, index: int) -> None:
        self.cursor.switch(index)
        chapter = self.cursor.chapter
        self.query_one(StepList).reset()
        self._shown_steps = 0
        if chapter.loaded:
            self.steps_loaded()
        elif self.background:
            self.query_one("#loading", ProgressBar).display = True
            self.load_in_background(index)
        else:
            self.cursor.load(index)
            self.steps_loaded()
        self.refresh_view()

    @work(thread=True, exclusive=True, group="load")
    def load_in_background(self, index: int) -> None:
        every = 50

        def progress(done: int, total: int) -> None:
            if done % every == 0 or done == total:
                self.call_from_thread(self.loading_progress, index, done, total)

        self.cursor.load(index, progress)
        self.call_from_thread(self.loading_progress, index, len(self.cursor.chapters[index].timeline),
                              len(self.cursor.chapters[index].scenario.steps))

    def loading_progress(self, index: int, done: int, total: int) -> None:
        if index != self.cursor.chapter_index:
            return
        bar = self.query_one("#loading", ProgressBar)
        bar.update(total=max(total, 1), progress=done)
        bar.display = done < total
        self.steps_loaded()

    def steps_loaded(self) -> None:
        """Add the steps checked since the list was last extended."""
        records = self.cursor.timeline.records
        with self.cursor.lock:
            new = records[self._shown_steps:len(records)]
        if new:
            self.query_one(StepList).extend(new)
            self._shown_steps += len(new)
        self.query_one(StepPanel).border_title = self._subtitle()

    # ---- rendering -----------------------------------------------------------------------------
    def _subtitle(self) -> str:
        c = self.cursor
        chapter = f"  (chapter {c.chapter_index + 1}/{len(c.chapters)})" if len(c.chapters) > 1 else ""
        loading = f", {c.available:,} checked" if c.available < c.total else ""
        return f"{c.chapter.scenario.name} — step {c.step:,}/{c.total:,}{loading}{chapter}"

    def refresh_view(self, follow: bool = True) -> None:
        cursor = self.cursor
        state, diff = cursor.state, cursor.diff()
        focus = cursor.focus_node() if follow else self.selected
        self.query_one(StepPanel).show_cursor(cursor)
        self.query_one(Banner).show_cursor(cursor)
        self.query_one(TreePanel).show(state, diff, focus)
        self.query_one(EventsPanel).show_step(cursor.record)
        self.query_one(PoolsPanel).show_state(state, cursor.previous_state, cursor.record)
        self.query_one(LRUPanel).show_state(state, diff)
        self.selected = focus
        self.query_one(Inspector).show_node(cursor, focus)
        self.query_one(StepList).select_step(cursor.step)
        self.query_one(StepPanel).border_title = self._subtitle()  # not the header: it would relayout every step

    # ---- messages from the panels ------------------------------------------------------------
    @on(NodeChosen)
    def node_chosen(self, message: NodeChosen) -> None:
        self.selected = message.node_id
        self.query_one(Inspector).show_node(self.cursor, message.node_id)

    @on(StepChosen)
    def step_chosen(self, message: StepChosen) -> None:
        if message.step != self.cursor.step:
            self.cursor.go(message.step)
            self.refresh_view()

    # ---- actions (the binding table's targets) ---------------------------------------------------
    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Keys type into a text input instead of acting."""
        return not isinstance(self.focused, Input)

    def _move(self, step: int) -> None:
        before = self.cursor.step
        if self.cursor.go(step) != before:
            self.refresh_view()

    def action_next(self) -> None:
        """Step forward."""
        self._move(self.cursor.step + 1)

    def action_previous(self) -> None:
        """Step back."""
        self._move(self.cursor.step - 1)

    def action_first(self) -> None:
        """The start of the chapter."""
        self._move(0)

    def action_last(self) -> None:
        """The last checked step."""
        self._move(self.cursor.available)

    def action_goto(self) -> None:
        """Ask for a step number and jump there."""
        def jump(step: int | None) -> None:
            if step is not None:
                self._move(step)

        self.push_screen(GotoScreen(self.cursor.available), jump)

    def action_chapter(self, delta: int) -> None:
        """Open the next or previous chapter (file)."""
        target = self.cursor.chapter_index + delta
        if 0 <= target < len(self.cursor.chapters):
            self.open_chapter(target)

    def action_follow(self) -> None:
        """Select the node the current step is about."""
        self.refresh_view(follow=True)

    def action_filter_events(self) -> None:
        """Show only one component's events (cycles through them, then all)."""
        self.query_one(EventsPanel).cycle_filter(self.cursor.state.components)

    def action_help(self) -> None:
        """Keys, the focused panel and the legend."""
        focused = self.focused.id if self.focused is not None else None
        self.push_screen(HelpScreen(self.command_table, focused))

    def action_export_svg(self) -> None:
        """Write the current step as SVG (what it changed highlighted) beside the scenario."""
        from ..render.dot import render_svg
        from ..render.picture import picture

        cursor = self.cursor
        stem = Path(cursor.chapter.scenario.path).stem
        out = Path(f"{stem}-step{cursor.step}.svg")
        n = 1
        while out.exists():  # never over a user's file
            out = Path(f"{stem}-step{cursor.step}-{n}.svg")
            n += 1
        try:
            with cursor.lock:
                dot = picture(cursor.timeline, cursor.step, cursor.step - 1 if cursor.step else None)
            svg = render_svg(dot)
            out.write_text(svg, encoding="utf-8")
        except Exception as exc:  # no dot, a read-only folder …: say so, never crash
            self.notify(f"export failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                        severity="error", timeout=8)
            return
        self.notify(f"wrote {out}")
