"""``b``: the breakpoint editor. Type a condition and press enter to add it; enter or
delete on a listed one removes it. ``c`` / ``C`` then run to the next / previous step
where any of them holds. Conditions are parsed (``model.breakpoints``), never run as
code, and a bad one is refused with the reason."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from ...model.debugging.breakpoints import ConditionError
from ...model.debugging.cursor import DEFAULT_BREAKPOINTS, TimelineCursor
from .dialog_note import DialogNote

EXAMPLES = (
    "violation · fingerprint · failed · error",
    "event=cascade component=swa · event=tombstone node=7 · cause=window",
    "node=7 · node=7 component=mamba (the node changed)",
    "swa_available<4 · full_evictable>=100 · requests>2 (crossing the threshold)",
    "op=req_prefill req=r3 · session=s1 · step>=100 (terms joined by spaces must all hold)",
)


class BreakpointScreen(DialogNote, ModalScreen[None]):
    BINDINGS = [Binding("escape", "dismiss", "close"), Binding("delete", "remove", "remove", show=False)]
    NOTE_ID = "breakpoint-error"

    def __init__(self, cursor: TimelineCursor) -> None:
        super().__init__()
        self.cursor = cursor

    def compose(self) -> ComposeResult:
        with Vertical(id="breakpoints"):
            yield Static(Text("breakpoints — c runs forward to one, C backward (esc closes)", style="bold"))
            yield Input(placeholder="add a condition, e.g. event=cascade component=swa", id="breakpoint-input")
            yield Static("", id="breakpoint-error")  # texts wrap at the dialog's edge
            yield OptionList(id="breakpoint-list")
            yield Static(Text("conditions:\n  " + "\n  ".join(EXAMPLES), style="dim"))

    def on_mount(self) -> None:
        self.refresh_list()
        self.query_one(Input).focus()

    def refresh_list(self) -> None:
        options = self.query_one(OptionList)
        options.clear_options()
        if not self.cursor.breakpoints:
            default = " or ".join(DEFAULT_BREAKPOINTS)
            options.add_option(Option(f"none set: c stops where a step has a {default}", disabled=True))
            return
        options.add_options(Option(c.text, id=f"b{i}") for i, c in enumerate(self.cursor.breakpoints))
        options.highlighted = 0

    def on_input_submitted(self, event: Input.Submitted) -> None:
        error = self.query_one("#breakpoint-error", Static)
        try:
            condition = self.cursor.add_breakpoint(event.value)
        except ConditionError as exc:
            error.update(Text(f"✗ {exc}", style="bold red"))
            return
        error.update(Text(f"added: {condition.text}", style="green"))
        event.input.value = ""
        self.refresh_list()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self._remove(event.option_index)

    def action_remove(self) -> None:
        options = self.query_one(OptionList)
        if options.highlighted is not None:
            self._remove(options.highlighted)

    def _remove(self, index: int) -> None:
        if 0 <= index < len(self.cursor.breakpoints):
            text = self.cursor.breakpoints[index].text
            self.cursor.remove_breakpoint(text)
            self.query_one("#breakpoint-error", Static).update(Text(f"removed: {text}", style="yellow"))
            self.refresh_list()
