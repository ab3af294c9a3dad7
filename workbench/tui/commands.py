"""The command palette, built from the binding table: ``category: verb`` entries."""

from __future__ import annotations

from functools import partial

from textual.command import Hit, Hits, Provider

from .bindings import key_label


class WorkbenchCommands(Provider):
    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        app = self.app
        for command in app.command_table:
            if command.action in ("command_palette", "focus_next"):
                continue
            title = f"{command.category}: {command.description}"
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), partial(app.run_action, command.action),
                          help=f"key {key_label(command.key)}")
