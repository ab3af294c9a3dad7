"""Files the workbench writes: never over an input, never over a user's file unless
asked (``--force``), never through a link or into something that is not a regular file
(with or without ``--force``), and never half-written in place.

Output goes to a temporary file beside the target and is renamed into place when the
writer finishes; a recording also when it stops early (Ctrl-C, a failed check), so it
keeps every finished step. Any other output that fails half-way is dropped, and the
file it would have replaced stays as it was. A recording to a new file is written in place
instead (flushed per line), so it can be followed while it grows.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Optional, TextIO

from .errors import ScenarioError, shown_name
from .inputs import special_kind
from .scenario import STDIN

STDOUT = "-"


def check_output(path: str, inputs: Iterable[str] = (), force: bool = False, option: str = "-o",
                 forcible: bool = True) -> None:
    """Refuse, before anything runs, a target that is an input of the same command (by
    any path or link), a symbolic link (dangling or not), anything but a regular file,
    an existing file without ``force``, or a path in a missing or read-only directory.
    ``forcible=False`` (the TUI, which has no --force): an existing file is simply taken."""
    if path == STDOUT:
        return
    where = f"{option} {shown_name(path)}"
    target = Path(path)
    try:
        own = os.lstat(target)
    except FileNotFoundError:
        own = None
    except OSError as exc:
        raise ScenarioError(f"{where}: cannot inspect it: {exc.strerror or exc}") from None
    if own is not None and stat.S_ISLNK(own.st_mode):
        dangling = "" if target.exists() else " (dangling)"
        stream = os.path.abspath(target).startswith(("/dev/", "/proc/"))  # /dev/stdout and the like
        raise ScenarioError(f"{where}: is a symbolic link{dangling}; urc never writes through a link "
                            + ("(- writes to standard output)" if stream else "(name the file itself)"))
    if own is not None:
        for source in inputs:
            if source != STDIN and _same_file(own, source):
                raise ScenarioError(f"{where}: that is an input file of this command; refusing to overwrite it "
                                    "(even with --force)" if forcible else f"{where}: that is the scenario being shown")
        kind = special_kind(own.st_mode)
        if kind is not None:
            raise ScenarioError(f"{where}: is {kind}; urc writes only regular files"
                                + (" (even with --force)" if forcible and kind != "a directory" else ""))
    parent = target.parent
    if not parent.is_dir():
        raise ScenarioError(f"{where}: directory {shown_name(str(parent))} does not exist")
    if not os.access(parent, os.W_OK):
        raise ScenarioError(f"{where}: directory {shown_name(str(parent))} is not writable")
    if own is not None and not force:
        raise ScenarioError(f"{where}: file exists (use --force to overwrite it)" if forcible
                            else f"{where}: file exists; pick another name")


def _same_file(own: os.stat_result, source: str) -> bool:
    try:
        other = os.stat(source)
    except OSError:
        return False
    return (own.st_dev, own.st_ino) == (other.st_dev, other.st_ino)


@contextlib.contextmanager
def open_output(path: str, inputs: Iterable[str] = (), force: bool = False, option: str = "-o",
                live: bool = False, forcible: bool = True) -> Iterator[TextIO]:
    """A text stream for ``path`` (``-``: standard output), checked by ``check_output``
    and renamed into place when the block ends, however it ends. ``live`` (a
    recording): a new target is written in place, created exclusively, so a reader
    (``urc tui --follow``) sees each line as it is flushed; only a ``--force``
    replacement still goes through the temporary file."""
    if path == STDOUT:
        yield sys.stdout
        return
    check_output(path, inputs, force, option, forcible)
    target = Path(path)
    where = f"{option} {shown_name(path)}"
    if live:
        try:
            stream = open(target, "x", encoding="utf-8")
        except FileExistsError:
            stream = None  # --force over an existing file: replace it whole at the end
        except OSError as exc:
            raise ScenarioError(f"{where}: cannot write: {exc.strerror or exc}") from None
        if stream is not None:
            with stream:
                yield stream
            return
    try:  # a fresh name beside the target (never one that exists, nor a link planted there)
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
        stream = os.fdopen(fd, "w", encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{where}: cannot write: {exc.strerror or exc}") from None
    keep = False
    try:
        yield stream
        keep = True
    except BaseException:
        keep = live  # a recording keeps every finished step; any other half-written file is dropped
        raise
    finally:
        try:
            stream.close()
        except OSError:
            keep = False  # a disk that filled up: the old file stays as it was
        if keep:
            os.chmod(temp, 0o666 & ~current_umask())  # as a plain open would create it (mkstemp: 0600)
            os.replace(temp, target)  # replaces a name, never writes through what it named
        else:
            os.unlink(temp)


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
