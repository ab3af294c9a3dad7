"""A one-line question with a default answer (a file name to save to): enter accepts,
escape cancels."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class PromptScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss_none", "cancel")]

    def __init__(self, question: str, default: str = "") -> None:
        super().__init__()
        self.question, self.default = question, default

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt"):
            yield Static(self.question, id="prompt-question")  # wraps at the dialog's edge
            yield Input(self.default, id="prompt-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        value = event.value.strip()
        if value:
            self.dismiss(value)
        else:
            self.notify("an answer, please (esc cancels)", severity="warning")

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
