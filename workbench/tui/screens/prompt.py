"""A one-line question with a default answer (a file name to save to): enter offers the
answer to ``accept``, which says whether it was taken; a refused answer leaves the
dialog open with what was typed and the reason on its note line. Escape cancels."""

from __future__ import annotations

from typing import Callable, Optional

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from .dialog_note import DialogNote


class PromptScreen(DialogNote, ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss_none", "cancel")]
    NOTE_ID = "prompt-note"

    def __init__(self, question: str, default: str = "", accept: Optional[Callable[[str], bool]] = None) -> None:
        """``accept(answer)``: True when the answer was taken (the dialog closes with it)."""
        super().__init__()
        self.question, self.default, self.accept = question, default, accept

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt"):
            yield Static(self.question, id="prompt-question")  # wraps at the dialog's edge
            yield Input(self.default, id="prompt-input")
            yield Static("", id="prompt-note")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        value = event.value.strip()
        if not value:
            self.notify("an answer, please (esc cancels)", severity="warning")
        elif self.accept is None or self.accept(value):
            self.dismiss(value)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
