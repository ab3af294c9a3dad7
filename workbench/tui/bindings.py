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
    description: str  # palette and help text
    category: str  # palette: "category: verb"
    footer: str = ""  # the footer's short label; "" keeps the key out of the footer (help lists it)
    priority: int = 0  # the footer shows the keys that fit, lowest priority number first


COMMANDS: tuple[Command, ...] = (
    Command("step.next", "n", "next", "next", "step", "next", 1),
    Command("step.previous", "p", "previous", "previous", "step", "prev", 1),
    Command("step.first", "less_than_sign", "first", "first", "step", "ends", 13),
    Command("step.last", "greater_than_sign", "last", "last", "step", "ends", 13),
    Command("step.goto", "g", "goto", "go to", "step", "goto", 3),
    Command("step.continue", "c", "continue(True)", "continue", "breakpoints", "continue", 8),
    Command("step.reverse", "C", "continue(False)", "reverse-continue", "breakpoints", "back", 8),
    Command("step.cancel_scan", "escape", "cancel_scan", "call off a breakpoint scan", "breakpoints"),
    Command("breakpoints.edit", "b", "breakpoints", "edit breakpoints", "breakpoints", "breaks", 9),
    Command("breakpoints.watch", "w", "watch", "watch the selected node", "breakpoints", "watch", 12),
    Command("view.diff", "d", "diff", "diff", "view", "diff", 7),
    Command("view.why", "y", "why", "why", "view", "why", 4),
    Command("view.timeline", "l", "timeline", "timeline charts", "view", "charts", 6),
    Command("live.command", "colon", "command", "live op", "live", "live op", 5),
    Command("live.save", "ctrl+s", "save_session", "save the session as a scenario", "live", "save", 16),
    Command("export.test", "t", "export_test", "export a pytest test up to this step", "export", "test", 15),
    Command("chapter.previous", "left_square_bracket", "chapter(-1)", "previous chapter", "chapter", "chapter", 10),
    Command("chapter.next", "right_square_bracket", "chapter(1)", "next chapter", "chapter", "chapter", 10),
    Command("view.follow", "f", "follow", "follow the step's node", "view", "follow", 11),
    Command("events.filter", "x", "filter_events", "filter events by component", "events", "filter", 14),
    Command("export.svg", "e", "export_svg", "export SVG", "export", "svg", 15),
    Command("panel.next", "tab", "focus_next", "next panel", "panel"),
    Command("panel.zoom", "z", "zoom", "zoom panel", "panel", "zoom", 5),
    Command("panel.open", "o", "open_collapsed", "open the next panel the terminal's size collapsed", "panel",
            "open", 4),
    Command("app.help", "f1", "help", "help", "app"),  # the footer ends with ? (help, or more)
    Command("app.help_question", "question_mark", "help", "help", "app"),
    Command("app.palette", "ctrl+p", "command_palette", "palette", "app"),  # tab, f1, ctrl+p: help lists them
    Command("app.quit", "q", "quit", "quit", "app", "quit", 2),
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
    """Textual's bindings; none shows in Textual's own footer (widgets/key_footer.py draws ours)."""
    return [Binding(c.key, c.action, c.description, show=False, id=c.id, priority=c.id not in UNDER_WIDGETS)
            for c in table]


def priority_actions(table: tuple[Command, ...]) -> frozenset[str]:
    """The action names bound with priority: ahead of every widget's keys, a dialog's too,
    so the app holds them back while a dialog is open."""
    return frozenset(c.action.split("(")[0] for c in table if c.id not in UNDER_WIDGETS)


HELP_ID = "app.help_question"


@dataclasses.dataclass(frozen=True)
class FooterEntry:
    keys: tuple[tuple[str, str], ...]  # (key as shown, its action): "[ ]" is two keys
    label: str
    ids: tuple[str, ...]  # the binding ids the entry stands for

    @property
    def text(self) -> str:
        return " ".join(key for key, _ in self.keys) + f" {self.label}"


def footer_items(table: tuple[Command, ...], width: int) -> list[FooterEntry]:
    """The footer at ``width`` columns: the keys that fit, taken by priority (a
    priority's keys together or not at all) and shown in table order, then ``?``: "more"
    when a key was left out (help lists them all), else "help". Keys that share a
    priority and a label read as one entry (``[ ] chapter``)."""
    help_command = next((c for c in table if c.id == HELP_ID), None)
    help_key = key_label(help_command.key) if help_command else "f1"
    merged: dict[tuple[int, str], list] = {}  # (priority, label) -> [first table row, commands]
    for order, command in enumerate(table):
        if command.priority and command.footer:
            merged.setdefault((command.priority, command.footer), [order, []])[1].append(command)
    groups: dict[int, list[tuple[int, FooterEntry]]] = {}
    for (priority, label), (order, same) in merged.items():
        entry = FooterEntry(tuple((key_label(c.key), c.action) for c in same), label, tuple(c.id for c in same))
        groups.setdefault(priority, []).append((order, entry))
    chosen: list[tuple[int, FooterEntry]] = []
    room = width - len(help_key) - len(" more")
    for priority in sorted(groups):
        cost = sum(len(entry.text) + 2 for _, entry in groups[priority])  # and two spaces after each
        if cost > room:
            break
        chosen += groups[priority]
        room -= cost
    left_out = len(chosen) < len(merged)
    tail = FooterEntry(((help_key, "help"),), "more" if left_out else "help", (HELP_ID,))
    return [entry for _, entry in sorted(chosen, key=lambda pair: pair[0])] + [tail]


def key_label(key: str) -> str:
    return {"less_than_sign": "<", "greater_than_sign": ">", "question_mark": "?", "colon": ":",
            "left_square_bracket": "[", "right_square_bracket": "]"}.get(key, key)


def is_printable(key: str) -> bool:
    """A key that types a character (``n``, ``C``, ``colon``): in a text input it types."""
    return len(key) == 1 or key in ("colon", "less_than_sign", "greater_than_sign", "question_mark",
                                    "left_square_bracket", "right_square_bracket", "space")
