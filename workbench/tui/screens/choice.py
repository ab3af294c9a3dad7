"""A question with a few answers, each a key from the binding table's ``ANSWERS``: quit
with live ops not saved (y quits; n, esc and enter stay), or which test ``t`` writes for
a run that departs from its scenario (k keeps its expectations, p pins today's results).
Dismissed with the answer's name; a key the dialog does not offer does nothing."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from ..bindings import ANSWERS, bindings


class ChoiceScreen(ModalScreen[str]):
    BINDINGS = bindings(ANSWERS)

    def __init__(self, question: str, answers: dict[str, str]) -> None:
        """``answers``: the answer names offered (``yes``, ``no``, ``keep``, ``pin``), each
        with the line that says its keys and what it does."""
        super().__init__()
        self.question, self.answers = question, answers

    def compose(self) -> ComposeResult:
        with Vertical(id="choice"):
            yield Static(Text(self.question, style="bold"), id="choice-question")  # wraps at the dialog's edge
            yield Static("\n".join(self.answers.values()), id="choice-answers")

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        return action != "answer" or parameters[0] in self.answers

    def action_answer(self, name: str) -> None:
        if name in self.answers:
            self.dismiss(name)
