"""The one error of bad input (``ScenarioError``: ``file:line: message (field 'x')``,
exit code 2) and how a user's values appear in it: always on one line (control
characters escaped), and elided with their length when long, so a 400-digit token or
a file name holding a newline never floods or splits the message. ``printable`` is
the one gate for any text a file brought (names, ids, paths, messages) on its way to
a terminal, a widget or an SVG: nothing it holds can drive the screen."""

from __future__ import annotations

from typing import Any, Optional

# What reading a value that is not as its reader expects raises: from a stored run, a
# damaged (or crafted) file, said as such in one line rather than as urc's own error.
DATA_ERRORS = (AttributeError, KeyError, IndexError, TypeError, ValueError, OverflowError, RecursionError)
SHOWN_CHARS = 40  # a value longer than this is cut, and its length said
_BIDI = (*range(0x202a, 0x202f), *range(0x2066, 0x206a))  # overrides and isolates: they reorder what follows
_CONTROL = ({i: f"\\x{i:02x}" for i in (*range(0x20), *range(0x7f, 0xa0))} | {i: f"\\u{i:04x}" for i in _BIDI}
            | {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
_LINES = {i: shown for i, shown in _CONTROL.items() if i != ord("\n")}


def printable(text: object, lines: bool = False) -> str:
    """``text`` with every control character (C0 with NUL and ESC, DEL, C1) and bidi
    override escaped visibly (``\\x1b``, ``\\u202e``), so a file's text cannot clear the
    screen, set a title or reorder a line; ``lines`` keeps ``\\n`` for text shown on
    several lines (a description)."""
    return str(text).translate(_LINES if lines else _CONTROL)


def one_line(text: str) -> str:
    """``text`` with every control character escaped (``\\n``, ``\\x1b``): ``printable``, on one line."""
    return printable(text)


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """A user's value as it reads in a message: ``repr`` for strings, JSON-like for the
    rest; past ``limit`` characters cut, with the whole length said."""
    return elide(repr(value) if isinstance(value, str) else _plain(value), limit)


def elide(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` on one line, cut past ``limit`` characters with its whole length said."""
    text = one_line(text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} chars)"


def shown_name(name: str, limit: int = 200) -> str:
    """A file name in a message: one line, and cut only when absurdly long."""
    return elide(name, limit)


def _plain(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value) if not isinstance(value, int) or abs(value) < 10**4300 else "a huge int"
    if isinstance(value, (list, dict)):
        return f"a {'list' if isinstance(value, list) else 'table'} of {len(value):,}"
    return f"a {type(value).__name__}"


class ScenarioError(Exception):
    """An invalid scenario file or usage: ``file:line: message`` (exit code 2)."""

    def __init__(self, message: str, file: str = "", line: Optional[int] = None, field: Optional[str] = None):
        self.file, self.line, self.field = file, line, field
        self.message = one_line(message)
        where = shown_name(file) + (f":{line}" if line else "")
        what = f" (field {shown(field)})" if field else ""
        self.brief = f"{self.message}{what}"  # without file:line: the TUI's words for a command it ran
        super().__init__(f"{where}: {self.brief}" if where else self.brief)
