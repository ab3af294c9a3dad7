"""Files the workbench writes: never over an input, never over a user's file unless
asked (``--force``), and never half-written in place.

Output goes to a temporary file beside the target and is renamed into place when the
writer finishes — also when it stops early (Ctrl-C, a failed check), so a streamed
recording keeps every finished step. A recording to a new file is written in place
instead (flushed per line), so it can be followed while it grows.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from .scenario import STDIN, ScenarioError

STDOUT = "-"


def check_output(path: str, inputs: Iterable[str] = (), force: bool = False, option: str = "-o") -> None:
    """Refuse, before anything runs, a target that is an input, exists (without
    ``force``), is a directory, or lies in a missing directory."""
    if path == STDOUT:
        return
    target = Path(path)
    for source in inputs:
        if source != STDIN and _same_file(target, Path(source)):
            raise ScenarioError(f"{option} {path}: that is an input file; refusing to overwrite it (even with --force)")
    if target.is_dir():
        raise ScenarioError(f"{option} {path}: is a directory")
    parent = target.parent
    if not parent.is_dir():
        raise ScenarioError(f"{option} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ScenarioError(f"{option} {path}: directory {parent} is not writable")
    if target.exists() and not force:
        raise ScenarioError(f"{option} {path}: file exists (use --force to overwrite it)")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


@contextlib.contextmanager
def open_output(path: str, inputs: Iterable[str] = (), force: bool = False, option: str = "-o",
                live: bool = False) -> Iterator[TextIO]:
    """A text stream for ``path`` (``-``: standard output), checked by ``check_output``
    and renamed into place when the block ends, however it ends. ``live`` (a
    recording): a new target is written in place, created exclusively, so a reader
    (``urc tui --follow``) sees each line as it is flushed; only a ``--force``
    replacement still goes through the temporary file."""
    if path == STDOUT:
        yield sys.stdout
        return
    check_output(path, inputs, force, option)
    target = Path(path)
    if live:
        try:
            stream = open(target, "x", encoding="utf-8")
        except FileExistsError:
            stream = None  # --force over an existing file: replace it whole at the end
        except OSError as exc:
            raise ScenarioError(f"{option} {path}: cannot write: {exc.strerror or exc}") from None
        if stream is not None:
            with stream:
                yield stream
            return
    temp = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        stream = open(temp, "x", encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{option} {path}: cannot write: {exc.strerror or exc}") from None
    try:
        yield stream
    finally:
        stream.close()
        os.replace(temp, target)
