"""The footer: the keys that fit the terminal's width, most needed first, from the one
binding table (``bindings.footer_items``), ending with ``? more`` when some were left out
(``?`` lists them all). A click on a key runs it, as the key would."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.widgets import Static

from ..bindings import footer_items


class KeyFooter(Static):
    COMPONENT_CLASSES = {"key-footer--key"}  # the key's look (workbench.tcss)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.spans: list[tuple[int, int, str]] = []  # (first column, past the last, action) of each key shown

    def on_mount(self) -> None:
        self.draw()

    def on_resize(self) -> None:
        self.draw()

    def draw(self) -> None:
        text, self.spans = Text(), []
        key_style = self.get_component_rich_style("key-footer--key", partial=True)
        for entry in footer_items(self.app.command_table, self.size.width):
            if text:
                text.append("  ")
            start = len(text)
            for key, action in entry.keys:  # each key of "[ ]" runs its own action
                self.spans.append((start, start + len(key), action))
                start += len(key) + 1
            text.append(" ".join(key for key, _ in entry.keys), style=key_style)  # one run: one look
            start = len(text)
            text.append(f" {entry.label}")
            self.spans.append((start, len(text), entry.keys[0][1]))
        self.update(text)

    async def on_click(self, event: events.Click) -> None:
        for start, end, action in self.spans:
            if start <= event.x < end:
                await self.app.run_action(action)
                return
