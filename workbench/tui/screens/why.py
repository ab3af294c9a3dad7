"""``y``: why the selected node is as it is, or why the step's match stopped where it
did — the model's explanation (``model.why``), in sentences, with the steps it cites.
``note`` says what it answers about when the focused list had nothing to ask about."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ...model.scenarios.errors import printable


class WhyScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,y,q", "dismiss", "close")]

    def __init__(self, explanation, note: str = "") -> None:
        super().__init__()
        self.explanation, self.note = explanation, note

    def compose(self) -> ComposeResult:
        answer = self.explanation
        text = Text()
        if self.note:
            text.append(printable(self.note) + "\n\n", style="italic yellow")
        text.append(printable(answer.title) + "\n\n", style="bold")
        for line in answer.lines:  # its sentences name the file's requests and sessions
            text.append(printable(line) + "\n")
        if answer.steps:
            text.append("\nsteps cited: " + ", ".join(map(str, answer.steps)) + "  (esc, then g to go to one)", style="dim")
        with VerticalScroll(id="why"):
            yield Static(text)
            yield Static(Text("esc closes", style="dim"))
