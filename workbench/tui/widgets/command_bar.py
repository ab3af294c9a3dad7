"""``:``: the live-op command bar. Type an op as in a scenario (``insert 1 2 3 4``,
``match 1 2 as m1``, ``lock m1 as L1`` …) and press enter to run it at the end of the
timeline; op names and live match, lock and request names complete (→ accepts).
Escape hides the bar. The app parses and runs the text; the bar only edits it."""

from __future__ import annotations

from collections.abc import Callable

from textual.binding import Binding
from textual.suggester import Suggester
from textual.widgets import Input

from ...model.scenarios.live import complete


class LiveOpSuggester(Suggester):
    """Completes the word being typed from the model's completion candidates."""

    def __init__(self, names: Callable[[], dict[str, list[str]]], components: Callable[[], list[str]]) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.names, self.components = names, components

    async def get_suggestion(self, value: str) -> str | None:
        word = value.split(" ")[-1]
        head = value[: len(value) - len(word)]
        for candidate in complete(value, self.names(), self.components()):
            if candidate.startswith(word) and candidate != word:
                return head + candidate
        return None


class CommandBar(Input):
    BINDINGS = [Binding("escape", "close", "close", show=False)]

    def __init__(self, names: Callable[[], dict[str, list[str]]], components: Callable[[], list[str]], **kwargs) -> None:
        super().__init__(placeholder="op to run at the end, e.g. insert 1 2 3 4 · match 1 2 as m1 · evict swa=4",
                         suggester=LiveOpSuggester(names, components), **kwargs)
        self.can_focus = False  # hidden until ":": it must not take the app's first focus


    def open(self) -> None:
        self.display = True
        self.can_focus = True
        self.focus()

    def action_close(self) -> None:
        self.display = False
        self.can_focus = False
        self.value = ""
        self.app.query_one("#tree").focus()
        self.app.call_after_refresh(self.app.fit_middle)  # its row goes back to the panels
