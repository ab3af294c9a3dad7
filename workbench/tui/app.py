"""``urc tui``: the workbench. The app owns a ``TimelineCursor`` (the model), renders
it through one widget per panel and turns keys into cursor commands; it never
touches a runner or the cache. Long traces load in a worker thread, and the UI is
usable from the first checked step. With a ``TraceFollower`` it tails a growing
trace, adding its steps as they arrive.

Panels: ``LAYOUT`` (``layout.py``) lists them, one line each (where, widget class, id,
title). On every step the app builds one ``StepView`` (``cursor.view``) and calls each
panel's ``show(view)``. The exports (SVG, scenario, regression test) are ``exports.py``'s."""

from __future__ import annotations

from typing import Optional

from textual import on, work
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Header, Input, ProgressBar

from ..model.debugging.cursor import TimelineCursor
from ..model.scenarios.errors import DATA_ERRORS, one_line, printable
from ..model.scenarios.scenario import Scenario, ScenarioError
from ..model.timeline.step_view import StepView
from .bindings import COMMANDS as COMMAND_TABLE
from .bindings import Command, bindings, commands, footer_items, is_printable, priority_actions
from .commands import WorkbenchCommands
from .exports import ExportActions
from .fitting import Fitting
from .scan_action import ScanAction
from .why_action import WhyAction
from .layout import AREAS, LAYOUT, Slot
from .messages import NodeChosen, SessionChosen, StepChosen
from .screens.breakpoints import BreakpointScreen
from .screens.choice import ChoiceScreen
from .screens.diff import DiffScreen
from .screens.goto import GotoScreen
from .screens.help import HelpScreen
from .widgets.command_bar import CommandBar
from .widgets.events_panel import EventsPanel
from .widgets.key_footer import KeyFooter
from .widgets.panel_strip import PanelStrip
from .widgets.panel import Panel
from .widgets.requests_panel import RequestsPanel
from .widgets.sessions_panel import SessionsPanel
from .widgets.step_list import StepList
from .widgets.step_panel import StepPanel
from .widgets.tree_panel import TreePanel


WHILE_OPENING = ("quit", "help", "command_palette", "chapter")  # actions that need no cache


def damage_text(error: Exception) -> str:
    return printable(f"damaged store: a value is not as urc writes it ({type(error).__name__}: {error})")[:300]


class WorkbenchApp(Fitting, ExportActions, WhyAction, ScanAction, App[None]):
    CSS_PATH = "workbench.tcss"
    TITLE = "urc workbench"
    COMMANDS = App.COMMANDS | {WorkbenchCommands}
    BINDINGS = bindings(COMMAND_TABLE)

    FOLLOW_EVERY = 0.5  # seconds between looks at a followed trace

    def __init__(self, scenarios: list[Scenario], keymap: Optional[dict[str, str]] = None,
                 background: bool = True, follower=None, divergences: Optional[dict] = None,
                 layout: tuple[Slot, ...] = LAYOUT) -> None:
        super().__init__()
        unknown = [slot.area for slot in layout if slot.area not in AREAS]
        if unknown:
            raise ValueError(f"unknown layout area {unknown[0]!r}; known: {', '.join(AREAS)}")
        self.panel_layout = layout
        self.panels: list[Panel] = []  # in layout order, once composed
        self.view: Optional[StepView] = None
        self.divergences = divergences or {}  # file -> (step, text): urc tui --against sglang
        self.cursor = TimelineCursor(scenarios)
        self.follower = follower  # a model.follow.TraceFollower on the first chapter's file, or None
        self.command_table: tuple[Command, ...] = commands(keymap)
        if keymap:
            self.set_keymap(keymap)  # Textual rebinds by binding id
        self.background = background
        self._shown_steps = 0
        self._bottom_rows = 4  # pools the bottom row is sized for (workbench.tcss: #bottom)
        self.selected: Optional[int] = None
        self.selected_session: Optional[str] = None  # the session whose nodes the tree highlights
        self.input_error: Optional[ScenarioError] = None  # a chapter whose cache could not be built

    def notify(self, message: str, **options) -> None:
        """While a dialog with a text input is open, say it on the dialog's note line too
        (no toast covers the input there: screens/dialog_note.py)."""
        say = getattr(self.screen, "say", None)
        if say is not None:
            say(message)
        super().notify(message, **options)

    def _panels_in(self, area: str) -> ComposeResult:
        for slot in self.panel_layout:
            if slot.area == area:
                panel = slot.panel(id=slot.id)
                panel.border_title = slot.title or None
                self.panels.append(panel)
                yield panel

    def compose(self) -> ComposeResult:
        self.panels = []
        yield Header()
        yield from self._panels_in("top")
        yield PanelStrip(id="strip")
        with Horizontal(id="main"):
            yield from self._panels_in("main")
            with Vertical(id="middle"):
                yield from self._panels_in("middle")
            with Vertical(id="side"):
                yield from self._panels_in("side")
        with Horizontal(id="bottom"):
            yield from self._panels_in("bottom")
        yield ProgressBar(id="loading", show_eta=False)
        yield ProgressBar(id="scanning", show_eta=False)  # a breakpoint scan (scan_action.py)
        yield CommandBar(self.cursor.names, lambda: list(self.cursor.chapter.scenario.config["components"]),
                         id="command")
        yield KeyFooter(id="footer")

    def on_mount(self) -> None:
        self.query_one(StepList).reset()
        self.query_one("#loading", ProgressBar).display = False
        self.query_one("#scanning", ProgressBar).display = False
        self.query_one(PanelStrip).collapse(self.collapsed_panels())
        self.open_chapter(0)
        self.query_one(StepList).focus()  # arrows, enter and z act on the steps from the first key
        if self.follower is not None:
            self.set_interval(self.FOLLOW_EVERY, self.poll_follower)

    # ---- loading -------------------------------------------------------------------------------
    def open_chapter(self, index: int) -> None:
        self.cursor.switch(index)
        self.selected_session = None
        chapter = self.cursor.chapter
        if not chapter.ready and self.background:  # its cache is built off the UI thread: show its text now
            self.query_one(StepList).reset()
            self.query_one(StepPanel).opening(chapter.scenario, self.cursor.chapter_index, len(self.cursor.chapters))
            # after the frame is drawn: the import holds the interpreter while it loads torch's libraries
            self.call_after_refresh(self.prepare_in_background, self.cursor.chapter_index)
            return
        self.refresh_bindings()  # the keys that waited for the chapter's cache
        self.query_one(StepList).reset(chapter.timeline.records if chapter.read_only else None)
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

    @work(thread=True, group="prepare")
    def prepare_in_background(self, index: int) -> None:
        try:
            self.cursor.prepare(index)
        except ScenarioError as exc:  # a [config] the loader passed but no cache can be built from
            self.call_from_thread(self._cannot_prepare, index, exc)
            return
        self.call_from_thread(self._prepared, index)

    def _cannot_prepare(self, index: int, exc: ScenarioError) -> None:
        """Say why, on the chapter's text and as a toast; ``urc tui`` exits 2 with it
        once the user quits (the workbench stays open for the other chapters)."""
        self.input_error = exc
        if index == self.cursor.chapter_index:
            self.query_one(StepPanel).cannot_open(self.cursor.chapter.scenario, str(exc))
        self.notify(printable(str(exc)), severity="error", markup=False)

    def _prepared(self, index: int) -> None:
        if index == self.cursor.chapter_index:  # still the chapter on screen
            self.open_chapter(index)

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
            new = [] if self.cursor.chapter.read_only else records[self._shown_steps:len(records)]
        if new:
            self.query_one(StepList).extend(new)
            self._shown_steps += len(new)
        self.query_one(StepPanel).head(self.cursor.view(follow=False).heading)  # steps checked so far

    # ---- rendering -----------------------------------------------------------------------------
    def refresh_view(self, follow: bool = True) -> bool:
        """One view of the step, shown by every panel; False (and said) where a stored
        run's step cannot be read or shown (a damaged store): the workbench stays open."""
        cursor = self.cursor
        try:
            view = cursor.view(follow, self.selected, self.divergences.get(cursor.chapter.scenario.path))
            view = self.view = view.choosing_session(self.selected_session)
            self.selected = view.selected
            self.sub_title = view.config_line  # the Header: which cache, which model options
            self._fit_pools(len(view.state.pools))
            for panel in self.panels:
                panel.show(view)
            self.fit_middle()  # the step's text sizes its panel
            self.call_after_refresh(self.fit_middle)  # again once a banner shown or hidden is laid out
        except (ScenarioError, *DATA_ERRORS) as exc:
            if not isinstance(exc, ScenarioError) and not cursor.chapter.read_only:
                raise  # urc's own error: a live run's values are the cache's, not a file's
            self.notify(getattr(exc, "brief", None) or damage_text(exc), severity="error", markup=False)
            return False
        return True

    # ---- messages from the panels ------------------------------------------------------------
    @on(NodeChosen)
    def node_chosen(self, message: NodeChosen) -> None:
        self.selected = message.node_id
        if self.view is not None:
            self.view = self.view.selecting(message.node_id)
            self._show_in_panels("follows_selection")

    @on(SessionChosen)
    def session_chosen(self, message: SessionChosen) -> None:
        if message.sid == self.selected_session:
            return
        self.selected_session = message.sid
        if self.view is not None:
            self.view = self.view.choosing_session(message.sid)
            self._show_in_panels("follows_session")

    def _show_in_panels(self, follows: str) -> None:
        """Show the view in the panels that follow what changed (``follows_selection``, ``follows_session``)."""
        for panel in self.panels:
            if getattr(panel, follows):
                panel.show(self.view)

    @on(StepChosen)
    def step_chosen(self, message: StepChosen) -> None:
        if message.step != self.cursor.step:
            self.cursor.go(message.step)
            self.refresh_view()

    # ---- actions (the binding table's targets) ---------------------------------------------------
    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """While a dialog is open its own keys answer and the table's wait: bound with
        priority, they would act behind it (n stepping under the help, q quitting from it,
        y opening a second why). Printable keys type into a text input instead of acting;
        tab, ctrl+… and function keys still act."""
        if isinstance(self.screen, ModalScreen):
            return action not in priority_actions(self.command_table)
        if not self.cursor.chapter.ready:  # its cache is being built: nothing to step through yet
            return action in WHILE_OPENING
        if not isinstance(self.focused, Input):
            return True
        return not any(c.action.split("(")[0] == action and is_printable(c.key) for c in self.command_table)

    def _move(self, step: int) -> None:
        before = self.cursor.step
        if self.cursor.go(step) != before and not self.refresh_view():
            self.cursor.go(before)  # a step that cannot be read: stay where the panels are

    def action_next(self) -> None:
        """Step forward; at a chapter's last step, say so and what follows."""
        cursor = self.cursor
        if cursor.step >= cursor.available and cursor.chapter.loaded:
            index, after = cursor.chapter_index, len(cursor.chapters) - cursor.chapter_index - 1
            follows = (f"{after} chapter{'s' if after != 1 else ''} follow: ] opens chapter {index + 2}" if after
                       else "no chapter follows ([ goes back one)" if index else "no chapter follows")
            self.notify(f"step {cursor.step:,} is the last of chapter {index + 1} "
                        f"({one_line(cursor.chapter.scenario.name)}); {follows}", markup=False)
            return
        self._move(cursor.step + 1)

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
        """Ask for a step number and jump there; a step past either end goes to that end
        and says so."""
        def jump(step: int | None) -> None:
            if step is None:
                return
            cursor = self.cursor
            last = cursor.available
            if step > last:
                checked = "" if cursor.chapter.loaded else f" checked so far (of {cursor.total:,})"
                self.notify(f"step {step:,} is past the last step{checked} {last:,}; went to {last:,}",
                            severity="warning")
            elif step < 0:
                self.notify(f"step {step:,} is before the start; went to step 0", severity="warning")
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

    def action_zoom(self) -> None:
        """Fill the screen with the focused panel (the tree when none is), or put it back."""
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
            return
        focused = self.focused
        target = focused if isinstance(focused, Panel) else self.query_one(TreePanel)
        screen.maximize(target, container=False)
        target.focus()

    def action_help(self) -> None:
        """Keys, the focused panel and the legend."""
        focused = self.focused.id if self.focused is not None else None
        footer = tuple(i for entry in footer_items(self.command_table, self.size.width) for i in entry.ids)
        self.push_screen(HelpScreen(self.command_table, focused, footer))

    # ---- breakpoints, diff ----------------------------------------------------------------
    def action_breakpoints(self) -> None:
        """Add and remove breakpoint conditions."""
        self.push_screen(BreakpointScreen(self.cursor))

    def action_watch(self) -> None:
        """Stop (c / C) where the selected node changes."""
        if self.selected is None:
            self.notify("select a node in the tree first", severity="warning")
            return
        condition = self.cursor.watch(self.selected)
        self.notify(f"watching #{self.selected}: c / C stop where it changes ({condition.text})", markup=False)

    def action_diff(self) -> None:
        """Compare two steps (the previous and the current to start with)."""
        step = self.cursor.step
        self.push_screen(DiffScreen(self.cursor, max(0, step - 1), step))

    # ---- live ops, quitting, following -------------------------------------------------------------
    def action_command(self) -> None:
        """Open the command bar to run an op at the end of the timeline."""
        if not self.cursor.chapter.loaded:
            self.notify("the chapter is still loading; live ops run after its last step", severity="warning")
            return
        self.query_one(CommandBar).open()
        self.call_after_refresh(self.fit_middle)  # the bar takes a row from the panels

    @on(Input.Submitted, "#command")
    def run_command(self, event: Input.Submitted) -> None:
        from ..model.scenarios.live import parse_command

        try:
            record = self.cursor.append(parse_command(event.value))
        except ScenarioError as exc:
            self.notify(exc.brief, title="not run", severity="error", timeout=10, markup=False)
            return
        event.input.value = ""
        self.steps_loaded()
        self.cursor.go(record.index)
        self.refresh_view()
        if not record.passed:
            self.notify(f"step {record.index} failed a check: see the banner", severity="error")

    async def action_quit(self) -> None:
        """Quit (q, ctrl+q); with live ops not saved, ask first: y quits, n / esc / enter stays."""
        unsaved = self.cursor.unsaved_ops()
        if not unsaved:
            self.exit()
            return
        ops = sum(unsaved.values())
        where = ", ".join(f"{n:,} in {one_line(name)}" for name, n in unsaved.items())
        question = (f"{ops:,} live op{'s' if ops != 1 else ''} not saved ({where}). Quit and lose "
                    f"{'them' if ops != 1 else 'it'}?")
        answers = {"yes": "y  quit and lose them", "no": "n / esc / enter  stay (ctrl+s saves the session)"}
        self.push_screen(ChoiceScreen(question, answers), lambda choice: choice == "yes" and self.exit())

    def poll_follower(self) -> None:
        """Add the followed trace's new steps; keep the cursor at the end if it was there."""
        from ..model.timeline.follow import FollowError

        follower, cursor = self.follower, self.cursor
        if follower is None or cursor.chapter_index != 0 or not cursor.chapter.loaded:
            return
        at_end = cursor.step == cursor.available
        try:
            new = follower.poll()
            if new:
                cursor.extend(new)
        except (FollowError, ScenarioError) as exc:
            self.follower = None
            self.notify(f"{one_line(str(exc))}; stopped following (the steps so far are kept)", title="follow",
                        severity="error", timeout=15, markup=False)
        self.steps_loaded()
        if at_end and cursor.available != cursor.step:
            cursor.last()
            self.refresh_view()
