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
    Command("step.cancel_scan", "escape", "cancel_scan", "call off a breakpoint scan", "breakpoints", show=False),
    Command("breakpoints.edit", "b", "breakpoints", "edit breakpoints", "breakpoints", show=False),
    Command("breakpoints.watch", "w", "watch", "watch the selected node", "breakpoints", show=False),
    Command("view.diff", "d", "diff", "diff", "view"),
    Command("view.why", "y", "why", "why", "view"),
    Command("view.timeline", "l", "timeline", "timeline charts", "view"),
    Command("live.command", "colon", "command", "live op", "live"),
    Command("live.save", "ctrl+s", "save_session", "save the session as a scenario", "live", show=False),
    Command("export.test", "t", "export_test", "export a pytest test up to this step", "export", show=False),
    Command("chapter.next", "right_square_bracket", "chapter(1)", "next chapter", "chapter", show=False),
    Command("chapter.previous", "left_square_bracket", "chapter(-1)", "previous chapter", "chapter", show=False),
    Command("view.follow", "f", "follow", "follow the step's node", "view", show=False),
    Command("events.filter", "x", "filter_events", "filter events by component", "events", show=False),
    Command("export.svg", "e", "export_svg", "export SVG", "export", show=False),
    Command("panel.next", "tab", "focus_next", "next panel", "panel", show=False),
    Command("panel.zoom", "z", "zoom", "zoom panel", "panel"),
    Command("app.help", "f1", "help", "help", "app"),
    Command("app.help_question", "question_mark", "help", "help", "app", show=False),
    Command("app.palette", "ctrl+p", "command_palette", "palette", "app", show=False),
    Command("app.quit", "q", "quit", "quit", "app"),
)


# A question dialog's answers (screens/choice.py): its own keys while it is open (a modal
# screen holds the app's keys back), each dialog offering some of them. Enter is the safe
# answer (stay, cancel): losing work takes a deliberate y.
ANSWERS: tuple[Command, ...] = (
    Command("answer.yes", "y", "answer('yes')", "yes", "answer"),
    Command("answer.no", "n,escape,enter", "answer('no')", "no", "answer"),
    Command("answer.keep", "k", "answer('keep')", "keep the scenario's expectations", "answer"),
    Command("answer.pin", "p", "answer('pin')", "pin today's results", "answer"),
)


class KeymapError(ValueError):
    """A keymap file that cannot be used (unknown id, not a string, bad TOML)."""


MODIFIERS = ("ctrl", "alt", "shift", "meta", "super", "hyper")


def load_keymap(path: Path) -> dict[str, str]:
    """A keymap file checked whole: known ids, key names Textual knows, and no key left
    on two commands (rebinding ``p`` to step.next would silently take it from
    step.previous)."""
    from ..model.scenarios.errors import ScenarioError, elide, shown
    from ..model.scenarios.inputs import TooLarge, read_regular, toml_loads

    try:
        data = read_regular(str(path), 1 << 20, "keymap file")
        if data is None:
            raise KeymapError(f"{path}: a keymap is at most 1 MiB")
        table = _flat(toml_loads(data.decode("utf-8")))
    except ScenarioError as exc:
        raise KeymapError(str(exc)) from None
    except TooLarge as exc:
        raise KeymapError(f"{path}:{exc.line}: {exc}" if exc.line else f"{path}: {exc}") from None
    except RecursionError:  # [[[… or {a={a=… nested past Python's stack
        raise KeymapError(f"{path}: a value is nested too deeply") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise KeymapError(f"{path}: cannot read keymap: {elide(str(exc), 200)}") from None
    known = {c.id for c in COMMANDS}
    for key, value in table.items():
        if key not in known:
            raise KeymapError(f"{path}: unknown binding id {shown(key)}; known: {', '.join(sorted(known))}")
        if not isinstance(value, str) or not value:
            raise KeymapError(f"{path}: {key} must be a key name (a string)")
        for one in value.split(","):
            problem = key_problem(one.strip())
            if problem:
                raise KeymapError(f"{path}: {key} = {shown(value)}: {problem}")
    owners: dict[str, str] = {}
    for command in commands(table):
        for one in command.key.split(","):
            other = owners.setdefault(one.strip(), command.id)
            if other != command.id:
                raise KeymapError(f"{path}: {shown(one.strip())} would be bound to both {other} and {command.id}; "
                                  "give one of them another key in the keymap")
    return dict(table)


def _flat(table: dict, prefix: str = "") -> dict:
    """``step.next = "j"`` reads in TOML as a table ``step`` holding ``next``: one id again."""
    flat = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def key_problem(key: str) -> str | None:
    """Why Textual would never deliver ``key`` ("ctrl+alt+shift+F99"), or None."""
    from textual.keys import KEY_NAME_REPLACEMENTS, Keys, key_to_character

    from ..model.scenarios.errors import shown

    *mods, base = key.split("+")
    bad = [m for m in mods if m not in MODIFIERS]
    if bad or len(set(mods)) != len(mods):
        return f"modifiers are {', '.join(MODIFIERS)}, each at most once"
    names = {k.value.split("+")[-1] for k in Keys if not k.value.startswith("<")} | set(KEY_NAME_REPLACEMENTS.values())
    character = base if len(base) == 1 else key_to_character(base)  # "less_than_sign" -> "<"
    if base in names or character is not None and len(character) == 1 and character.isprintable():
        return None
    return f"unknown key name {shown(base)} (keys are a character, f1-f24, or names such as enter, escape, tab, left)"


def commands(keymap: dict[str, str] | None = None) -> tuple[Command, ...]:
    keymap = keymap or {}
    return tuple(dataclasses.replace(c, key=keymap.get(c.id, c.key)) for c in COMMANDS)


UNDER_WIDGETS = {"panel.next", "step.cancel_scan"}  # bound without priority: a widget or dialog that takes the key
# (tab, esc) keeps it


def bindings(table: tuple[Command, ...]) -> list[Binding]:
    return [Binding(c.key, c.action, c.description, show=c.show, id=c.id, priority=c.id not in UNDER_WIDGETS)
            for c in table]


def priority_actions(table: tuple[Command, ...]) -> frozenset[str]:
    """The action names bound with priority: ahead of every widget's keys, a dialog's too,
    so the app holds them back while a dialog is open."""
    return frozenset(c.action.split("(")[0] for c in table if c.id not in UNDER_WIDGETS)


def key_label(key: str) -> str:
    return {"less_than_sign": "<", "greater_than_sign": ">", "question_mark": "?", "colon": ":",
            "left_square_bracket": "[", "right_square_bracket": "]"}.get(key, key)


def is_printable(key: str) -> bool:
    """A key that types a character (``n``, ``C``, ``colon``): in a text input it types."""
    return len(key) == 1 or key in ("colon", "less_than_sign", "greater_than_sign", "question_mark",
                                    "left_square_bracket", "right_square_bracket", "space")
