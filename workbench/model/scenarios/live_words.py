"""The words of a live command (the TUI's ``:`` bar): a line split into words, quoted
or not, and what an op's declaration lets a bare word be (its slot, its token field,
a flag, a keyword). What ``live`` parses with and ``live_format`` writes back with."""

from __future__ import annotations

import re
from typing import Optional

from .. import ops
from .errors import ScenarioError

TEXT_KEYWORDS = ("as", "expect_error", "description")  # each takes the next word as its value


def name_fields() -> frozenset[str]:
    """Fields whose values are strings: every op's names, and the texts."""
    return ops.name_fields() | frozenset(TEXT_KEYWORDS)


def reserved_words() -> frozenset[str]:
    """Words a bare name may not be (they read as keywords)."""
    return frozenset(TEXT_KEYWORDS + ("expect",)) | ops.flag_words()


def flag_fields(spec) -> dict[str, tuple[str, bool]]:
    """A bare word -> the flag field it sets, and to what."""
    return {f.flag_word: (f.name, f.flag_value) for f in spec.fields if f.flag_word}


def slot_of(spec) -> Optional[str]:
    return spec.slot.name if spec.slot is not None else None


def token_field_of(spec) -> Optional[str]:
    return spec.token_field.name if spec.token_field is not None else None


FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/@+-]*")  # written without quotes by format_command
INT = re.compile(r"-?[0-9]{1,4000}")  # int() refuses longer digit strings
ID_LIST = re.compile(r"\[(?:[0-9]{1,18}(?:,[0-9]{1,18})*)?\]")  # [3,1,2]: node ids
# [[1,2,3],4]: nodes by token path (tokens and runs, comma-separated) or id, as an order lists them
REF_LIST = re.compile(r"\[(?:(?:[0-9]{1,18}|\[[0-9.,]*\])(?:,(?:[0-9]{1,18}|\[[0-9.,]*\]))*)?\]")
NAME_LIST = re.compile(r"\[[A-Za-z_][A-Za-z0-9_]*(?:,[A-Za-z_][A-Za-z0-9_]*)*\]")  # [s1,t]: session ids
TOKEN = re.compile(r"[0-9]{1,20}")
RANGE = re.compile(r"([0-9]{1,20})\.\.([0-9]{1,20})")
ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}


# ---- words --------------------------------------------------------------------------------------


class Word:
    """One whitespace-separated word as (text, quoted) pieces, so ``a="b c"`` splits at the
    ``=`` while a quoted ``=`` or ``.`` stays part of a name."""

    def __init__(self, pieces: list[tuple[str, bool]]) -> None:
        self.pieces = pieces

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.pieces)

    @property
    def quoted(self) -> bool:
        return any(quoted for _, quoted in self.pieces)

    def split(self, char: str) -> Optional[tuple["Word", "Word"]]:
        """The parts either side of the first unquoted ``char`` (None when there is none)."""
        for i, (text, quoted) in enumerate(self.pieces):
            at = -1 if quoted else text.find(char)
            if at >= 0:
                left = self.pieces[:i] + [(text[:at], False)]
                right = [(text[at + 1:], False)] + self.pieces[i + 1:]
                return Word(left), Word(right)
        return None


def split_words(text: str) -> list[Word]:
    if '"' not in text and "'" not in text:  # the usual case, fast even for a pasted 1M-token key
        return [Word([(word, False)]) for word in text.split()]
    words: list[Word] = []
    pieces: Optional[list[tuple[str, bool]]] = None
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            if pieces is not None:
                words.append(Word(pieces))
                pieces = None
            i += 1
            continue
        pieces = [] if pieces is None else pieces
        if text[i] in "\"'":
            i, literal = _quoted(text, i)
            pieces.append((literal, True))
            continue
        j = i
        while j < n and not text[j].isspace() and text[j] not in "\"'":
            j += 1
        pieces.append((text[i:j], False))
        i = j
    if pieces is not None:
        words.append(Word(pieces))
    return words


def _quoted(text: str, start: int) -> tuple[int, str]:
    """The literal of the quote opening at ``start`` and the index after its end."""
    quote, out, i = text[start], [], start + 1
    while i < len(text):
        ch = text[i]
        if ch == quote:
            return i + 1, "".join(out)
        if ch == "\\" and quote == '"' and i + 1 < len(text):
            i += 1
            out.append(ESCAPES.get(text[i], text[i]))
        else:
            out.append(ch)
        i += 1
    raise ScenarioError(f"unclosed {quote} quote (column {start + 1})")
