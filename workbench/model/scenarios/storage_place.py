"""Where a scenario's file storage tier writes: never where the scenario file says.

Scenarios are shared as bug reports, and the file backend removes what fails its page
check in its directory, so a ``hicache.storage.path`` in a file is ignored (with a
note: the run is the same, only its pages land elsewhere). A command runs inside
``storage_scope``: each cache built from a scenario gets a fresh directory inside the
command's private temporary directory, removed on the way out however the command ends
— or, for ``urc run`` / ``urc tui --storage-dir DIR``, that directory, which keeps its
pages. Outside a scope (library use) the cache makes, and removes, its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import shutil
import tempfile
from typing import Any, Optional

from .errors import ScenarioError

IGNORED = "storage path in the file is ignored; pass --storage-dir to keep pages"

_named: Optional[str] = None  # the command's --storage-dir (absolute)
_root: Optional[str] = None  # the command's private temporary directory
_fresh = itertools.count(1)


def ignored_path_notice(config: Any, name: str) -> Optional[str]:
    """The note for a [config] whose storage table names a path (None: it names none)."""
    hicache = config.get("hicache") if isinstance(config, dict) else None
    storage = hicache.get("storage") if isinstance(hicache, dict) else None
    return f"{name}: {IGNORED}" if isinstance(storage, dict) and "path" in storage else None


def check_storage_dir(path: str) -> str:
    """``--storage-dir``'s directory, absolute, if the file backend may own it; else a
    ScenarioError, with nothing created or removed."""
    from cache.tiers.backends.owned_dir import refusal

    problem = refusal(path)
    if problem is not None:
        raise ScenarioError(f"--storage-dir: {problem}")
    return os.path.abspath(path)


@contextlib.contextmanager
def storage_scope(named: Optional[str] = None):
    """One command's storage: ``named`` (``--storage-dir``, checked first) or a private
    temporary directory, removed on every way out (an error, Ctrl-C)."""
    global _named, _root
    named = None if named is None else check_storage_dir(named)
    root = None if named is not None else _private_root()
    saved = _named, _root
    _named, _root = named, root
    try:
        yield
    finally:
        _named, _root = saved
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


def _private_root() -> Optional[str]:
    """The scope's temporary directory, made before any fork (fuzz workers share it);
    None where the temporary folder is not writable: a cache then makes its own, and
    only a scenario with a file storage tier is refused (in one line)."""
    try:
        return os.path.realpath(tempfile.mkdtemp(prefix="urc-storage-"))
    except OSError:
        return None


def placed(config):
    """A built ``CacheConfig`` with its file storage where the command puts it (the
    scenario's own path replaced): ``--storage-dir``, a fresh directory in the scope's
    private one, or none (the cache's own private directory)."""
    storage = config.hicache.storage if config.hicache is not None else None
    if storage is None or storage.backend != "file":
        return config
    path = _named
    if path is None and _root is not None:  # (the pid: forked fuzz workers share the scope)
        path = os.path.join(_root, f"cache-{os.getpid()}-{next(_fresh)}")
    if path == storage.path:
        return config
    hicache = dataclasses.replace(config.hicache, storage=dataclasses.replace(storage, path=path))
    return dataclasses.replace(config, hicache=hicache)
