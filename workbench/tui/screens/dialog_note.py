"""What is said while a dialog with a text input is open (a refused answer, a file not
saved) shows on the dialog's own note line, under the input: a toast at the screen's
edge could cover the input at small sizes, so these dialogs hold no toast rack (the
toasts show once the dialog closes)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class DialogNote:
    """Mixed into a ``ModalScreen`` that composes a ``Static`` with id ``NOTE_ID``; the
    app's ``notify`` calls ``say`` while such a dialog is on top."""

    NOTE_ID: str = ""

    def on_mount(self) -> None:
        self.query("#textual-toastrack").remove()

    def say(self, message: str) -> None:
        note = self.query_one(f"#{self.NOTE_ID}", Static)
        note.update(Text(message, style="bold yellow"))
        note.display = True
