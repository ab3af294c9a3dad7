"""``g``: type a step number, enter jumps there."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from .dialog_note import DialogNote


class GotoScreen(DialogNote, ModalScreen[int | None]):
    BINDINGS = [Binding("escape", "dismiss_none", "cancel")]
    NOTE_ID = "goto-note"

    def __init__(self, last: int) -> None:
        super().__init__()
        self.last = last

    def compose(self) -> ComposeResult:
        with Vertical(id="goto"):
            yield Static(f"go to step (0–{self.last:,}):", id="goto-question")  # wraps at the dialog's edge
            yield Input(placeholder="step number", type="integer", id="goto-input")
            yield Static("", id="goto-note")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            self.dismiss(int(event.value))
        except ValueError:
            self.notify("a step number, please", severity="warning")

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
