"""Reading a user's file, bounded: only regular files, and never more bytes than the
limit, counted as they are read (``st_size`` is 0 for ``/dev/zero`` and a pipe, so it
proves nothing). A FIFO is opened without blocking and refused at once; a device, a
directory or a socket likewise. So a bad input costs milliseconds and kilobytes."""

from __future__ import annotations

import json
import os
import stat

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


def loads_unique(text: str | bytes):
    """``json.loads`` that refuses an object naming a key twice (``DuplicateKeyError``)."""
    return json.loads(text, object_pairs_hook=_unique)
