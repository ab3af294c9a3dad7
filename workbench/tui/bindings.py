"""The one binding table: it feeds the app's key bindings, the footer, the command
palette and the help screen, so "what can I do here" never drifts. A keymap file
(TOML, ``binding_id = "key"``) rebinds any entry by id."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from textual.binding import Binding


@dataclasses.dataclass(frozen=True)
class Command:
    id: str
    key: str
    action: str
    description: str  # footer text
    category: str  # palette: "category: verb"
    show: bool = True  # in the footer


COMMANDS: tuple[Command, ...] = (
    Command("step.next", "n", "next", "next", "step"),
    Command("step.previous", "p", "previous", "previous", "step"),
    Command("step.first", "less_than_sign", "first", "first", "step"),
    Command("step.last", "greater_than_sign", "last", "last", "step"),
    Command("step.goto", "g", "goto", "go to", "step"),
    Command("step.continue", "c", "continue(True)", "continue", "breakpoints"),
    Command("step.reverse", "C", "continue(False)", "reverse-continue", "breakpoints"),
    Command("breakpoints.edit", "b", "breakpoints", "edit breakpoints", "breakpoints", show=False),
    Command("breakpoints.watch", "w", "watch", "watch the selected node", "breakpoints", show=False),
    Command("view.diff", "d", "diff", "diff", "view"),
    Command("view.why", "y", "why", "why", "view"),
    Command("live.command", "colon", "command", "live op", "live"),
    Command("live.save", "ctrl+s", "save_session", "save the session as a scenario", "live", show=False),
    Command("export.test", "t", "export_test", "export a pytest test up to this step", "export", show=False),
    Command("chapter.next", "right_square_bracket", "chapter(1)", "next chapter", "chapter", show=False),
    Command("chapter.previous", "left_square_bracket", "chapter(-1)", "previous chapter", "chapter", show=False),
    Command("view.follow", "f", "follow", "follow the step's node", "view", show=False),
    Command("events.filter", "x", "filter_events", "filter events by component", "events", show=False),
    Command("export.svg", "e", "export_svg", "export SVG", "export", show=False),
    Command("panel.next", "tab", "focus_next", "next panel", "panel", show=False),
    Command("app.help", "f1", "help", "help", "app"),
    Command("app.help_question", "question_mark", "help", "help", "app", show=False),
    Command("app.palette", "ctrl+p", "command_palette", "palette", "app", show=False),
    Command("app.quit", "q", "quit", "quit", "app"),
)


class KeymapError(ValueError):
    """A keymap file that cannot be used (unknown id, not a string, bad TOML)."""


def load_keymap(path: Path) -> dict[str, str]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise KeymapError(f"{path}: cannot read keymap: {exc}") from None
    known = {c.id for c in COMMANDS}
    for key, value in data.items():
        if key not in known:
            raise KeymapError(f"{path}: unknown binding id {key!r}; known: {', '.join(sorted(known))}")
        if not isinstance(value, str) or not value:
            raise KeymapError(f"{path}: {key} must be a key name (a string)")
    return dict(data)


def commands(keymap: dict[str, str] | None = None) -> tuple[Command, ...]:
    keymap = keymap or {}
    return tuple(dataclasses.replace(c, key=keymap.get(c.id, c.key)) for c in COMMANDS)


def bindings(table: tuple[Command, ...]) -> list[Binding]:
    return [Binding(c.key, c.action, c.description, show=c.show, id=c.id, priority=c.id != "panel.next")
            for c in table]


def key_label(key: str) -> str:
    return {"less_than_sign": "<", "greater_than_sign": ">", "question_mark": "?", "colon": ":",
            "left_square_bracket": "[", "right_square_bracket": "]"}.get(key, key)


def is_printable(key: str) -> bool:
    """A key that types a character (``n``, ``C``, ``colon``): in a text input it types."""
    return len(key) == 1 or key in ("colon", "less_than_sign", "greater_than_sign", "question_mark",
                                    "left_square_bracket", "right_square_bracket", "space")
