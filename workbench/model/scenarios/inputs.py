"""Reading a user's file, bounded: only regular files, and never more bytes than the
limit, counted as they are read (``st_size`` is 0 for ``/dev/zero`` and a pipe, so it
proves nothing). A FIFO is opened without blocking and refused at once; a device, a
directory or a socket likewise. So a bad input costs milliseconds and kilobytes."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import tomllib

import msgspec

from .errors import ScenarioError


def special_kind(mode: int) -> str | None:
    """What a file that is not a regular file is ("a named pipe (FIFO)"), or None."""
    for test, kind in ((stat.S_ISREG, None), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def open_regular(path: str, what: str = "file") -> int:
    """A read-only descriptor on ``path`` once it is known to be a regular file (through
    any link); else one line saying what it is. The caller closes it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ScenarioError("no such file", path) from None
    except IsADirectoryError:
        raise ScenarioError(f"is a directory, not a {what}", path) from None
    except OSError as exc:
        try:  # a socket cannot be opened at all (ENXIO): say what it is, not the errno
            kind = special_kind(os.stat(path).st_mode)
        except OSError:
            kind = None
        said = f"is {kind}, not a {what}; urc reads only regular files" if kind else f"cannot read file: {exc.strerror or exc}"
        raise ScenarioError(said, path) from None
    kind = special_kind(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise ScenarioError(f"is {kind}, not a {what}; urc reads only regular files", path)
    os.set_blocking(fd, True)
    return fd


def read_bounded(fd: int, limit: int, close: bool = True) -> bytes | None:
    """Up to ``limit`` bytes from ``fd`` (closed afterwards unless ``close`` is False:
    standard input stays open); None when there are more."""
    chunks, total = [], 0
    try:
        while total <= limit:
            chunk = os.read(fd, min(1 << 24, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        if close:
            os.close(fd)
    return None if total > limit else b"".join(chunks)


def check_stdin(fd: int) -> None:
    """Standard input may be a file, a pipe, a socket or a terminal — not a device that
    never ends (``< /dev/zero``); ``/dev/null`` is simply empty."""
    mode = os.fstat(fd)
    if (stat.S_ISCHR(mode.st_mode) and not os.isatty(fd) and mode.st_rdev != os.stat(os.devnull).st_rdev
            or stat.S_ISBLK(mode.st_mode)):
        raise ScenarioError(f"is {special_kind(mode.st_mode)}, not a scenario; urc reads only files, pipes and "
                            "terminals", "<stdin>")


def read_regular(path: str, limit: int, what: str = "file") -> bytes | None:
    """The bytes of the regular file ``path``, None when it holds more than ``limit``."""
    fd = open_regular(path, what)
    try:
        return read_bounded(fd, limit)
    except OSError as exc:
        raise ScenarioError(f"cannot read file: {exc.strerror or exc}", path) from None


class DuplicateKeyError(ValueError):
    """A JSON object that names one key twice: ``json`` would keep the last silently."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique(pairs: list[tuple[str, object]]) -> dict:
    table = dict(pairs)
    if len(table) != len(pairs):
        seen: set[str] = set()
        raise DuplicateKeyError(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return table


class TooLarge(ValueError):
    """A value past what the parsers read safely, said in words at its line (when known):
    an int longer than Python reads (``sys.get_int_max_str_digits()``: json and tomllib
    let that out as a bare ValueError), or a TOML dotted key of too many parts."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


MAX_KEY_PARTS = 32  # tomllib keeps every prefix of a dotted key: its memory grows as the parts squared
_PART = r"""(?:(?<![\w-])[\w-]++|"(?:[^"\\\n]|\\.)*+"|'[^'\n]*+')"""
_DOTTED = re.compile(r"(?:^|[{,])[ \t]*+(?:\[\[?+[ \t]*+)?+%s(?:[ \t]*+\.[ \t]*+%s){%d}"  # where a key starts
                     % (_PART, _PART, MAX_KEY_PARTS), re.ASCII | re.MULTILINE)


def _digits(exc: ValueError, text: str | None = None) -> TooLarge | None:
    """The int-limit ValueError in words, at the line of the first number past it in a
    TOML ``text``; None for any other error."""
    if type(exc) is not ValueError or "integer string conversion" not in str(exc):
        return None
    limit = sys.get_int_max_str_digits()
    runs = re.finditer(r"(?<![\d_])\d[\d_]{%d,}" % limit, text or "")
    long = next((m for m in runs if len(m[0]) - m[0].count("_") > limit), None)
    return TooLarge(f"a number has more than {limit:,} digits", _line(text, long.start()) if long else None)


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


_DECODER = json.JSONDecoder(object_pairs_hook=_unique)  # one for every line: json.loads with a hook builds one a call


_FAST = msgspec.json.Decoder()  # about twice json's speed on a trace line (most of it ids)
_KEY_END = re.compile(rb'"[ \t\n\r]*:')


def loads_unique(text: str | bytes):
    """``json.loads`` that refuses an object naming a key twice (``DuplicateKeyError``)
    and a number too long to read (``TooLarge``)."""
    try:
        if isinstance(text, (bytes, bytearray)):  # as json.loads reads bytes
            value = _one_object(text)
            if value is not None:
                return value
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        return _DECODER.decode(text)
    except ValueError as exc:
        raise _digits(exc) or exc from None


def _one_object(raw: bytes | bytearray) -> dict | None:
    """A line holding one JSON object and no other (a trace's step), read by msgspec;
    None for anything else, or anything msgspec refuses, which the exact reader then
    reads (or refuses) as before. msgspec keeps the last of a repeated key, so each key's
    end (a quote, then a colon) is counted in the text: a quote inside a string is
    escaped, so the count can only exceed the keys, and it equals the object's entries
    only when no key came twice."""
    if raw.count(b"{") != 1:
        return None
    try:
        value = _FAST.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    if type(value) is dict and len(_KEY_END.findall(raw)) == len(value):
        return value
    return None


def toml_loads(text: str, parser=tomllib) -> dict:
    """``parser.loads`` (``tomllib``, or the compiled ``tomli``: its TOMLDecodeError passes
    to the caller) that refuses, as ``TooLarge`` at its line, a number too long to read
    and a dotted key (``a.b.c``, ``[a.b.c]``) of more than ``MAX_KEY_PARTS`` parts: 40 KB
    of ``a.a.a…`` took tomllib to 1.5 GB, 1 MB of 998-part keys took tomli to 2 GB."""
    dotted = _DOTTED.search(text)
    if dotted:
        raise TooLarge(f"a dotted key has more than {MAX_KEY_PARTS} parts", _line(text, dotted.end()))
    try:
        return parser.loads(text)
    except ValueError as exc:  # (a TOMLDecodeError is no bare ValueError: it passes)
        raise _digits(exc, text) or exc from None
