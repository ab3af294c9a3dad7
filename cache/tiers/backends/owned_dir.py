"""The file backend's directory: it deletes files there (every ``*.bin`` and ``.*.tmp``
that fails its check), so it works only in a directory it created. Creating one writes
a marker file into it; a directory without the marker is never scanned, written or
cleared, so a path shared in a scenario cannot aim the backend at a model's weights or
the working directory. A symlink anywhere in the path is refused (it could lead
anywhere), and only the last part of a path is ever created, never its parents."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import weakref
from typing import Optional

from ...basics.errors import StorageDirError

MARKER = ".urc-storage"
MARKER_TEXT = ("urc file storage: urc created this directory and removes any *.bin or .*.tmp file in it "
               "that is not a page it wrote; delete the whole directory when done with it.\n")


def refusal(path) -> Optional[str]:
    """Why ``path`` cannot be the backend's directory, or None; touches nothing."""
    path = os.fspath(path) if isinstance(path, os.PathLike) else path
    if not isinstance(path, str) or not path or "\0" in path:
        return f"file storage path must be a non-empty string (got {path!r})"
    absolute = os.path.abspath(path)
    if os.path.realpath(absolute) != absolute:
        return f"file storage path {path!r} goes through a symlink: name the real directory"
    if not os.path.lexists(absolute):
        parent = os.path.dirname(absolute)
        if not os.path.isdir(parent):
            return f"file storage path {path!r}: its parent directory does not exist (only the last part is created)"
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"file storage path {path!r} cannot be created: its parent directory is not writable"
        return None
    if not os.path.isdir(absolute):
        return f"file storage path {path!r} exists and is not a directory"
    if not is_marked(absolute):
        return (f"file storage path {path!r} is a directory urc did not create (no {MARKER} marker): "
                "name a new directory, or one urc made")
    if not os.access(absolute, os.W_OK | os.X_OK):
        return f"file storage path {path!r} is not writable"
    return None


def is_marked(directory: str) -> bool:
    """Whether ``directory`` holds the marker (a regular file, not a link to one)."""
    try:
        return stat.S_ISREG(os.lstat(os.path.join(directory, MARKER)).st_mode)
    except OSError:
        return False


def claim(path: str) -> str:
    """The absolute directory the backend may own: a marked one as it is, an absent one
    created and marked. Raises StorageDirError with nothing created or removed."""
    path = os.fspath(path) if isinstance(path, os.PathLike) else path
    problem = refusal(path)
    if problem is not None:
        raise StorageDirError(problem)
    absolute = os.path.abspath(path)
    if not os.path.lexists(absolute):
        _create(path, absolute)
    return absolute


def check_owned(directory: str) -> None:
    """Before deleting there: the marker must still be in place."""
    if not is_marked(directory):
        raise StorageDirError(f"file storage directory {directory!r} lost its {MARKER} marker: not deleting there")


def _create(path: str, absolute: str) -> None:
    try:
        os.mkdir(absolute, 0o700)  # fails on anything already there, a symlink included
    except OSError as exc:
        raise StorageDirError(f"file storage path {path!r} cannot be created: {exc.strerror}") from None
    marker = os.path.join(absolute, MARKER)
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(MARKER_TEXT)
    except OSError as exc:
        with contextlib.suppress(OSError):  # leave nothing behind
            os.remove(marker)
        with contextlib.suppress(OSError):
            os.rmdir(absolute)
        raise StorageDirError(f"file storage path {path!r}: cannot write its marker: {exc.strerror}") from None


class PrivateDir:
    """A private temporary directory (``mkdtemp``) holding the backend's directory:
    removed by ``remove()``, or else when garbage collected or at interpreter exit."""

    def __init__(self) -> None:
        self.root = os.path.realpath(tempfile.mkdtemp(prefix="urc-storage-"))  # (a temp dir may sit behind a symlink)
        self.path = os.path.join(self.root, "pages")  # created, with its marker, by the backend
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.root, ignore_errors=True)

    def remove(self) -> None:
        self._finalizer()
