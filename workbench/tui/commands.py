"""The command palette, built from the binding table: ``category: verb`` entries, every
one of them listed while nothing is typed yet (Textual's own commands come after)."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from .bindings import key_label


class WorkbenchCommands(Provider):
    def _commands(self):
        app = self.app
        for command in app.command_table:
            if command.action not in ("command_palette", "focus_next"):
                yield (f"{command.category}: {command.description}", partial(app.run_action, command.action),
                       f"key {key_label(command.key)}")

    async def discover(self) -> Hits:
        for title, run, keys in self._commands():
            yield DiscoveryHit(title, run, help=keys)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, run, keys in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), run, help=keys)
